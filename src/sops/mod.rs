//! SOPS-compatible encryption of models files with age keys.

pub mod cipher;
pub mod file;
pub mod keys;
pub mod tree;

pub use file::{
    Decrypted, Encryption, SopsError, decrypt_in_place, decrypt_to_plain, encrypt, is_encrypted,
};
pub use keys::{KeyError, Keyring, Recipient};
