//! What tether trusts and how it signs, over bytes the caller read: [`trusted_keys`] (trusted
//! SSH and OpenPGP public keys, from an allowed-signers file or armored key blocks),
//! [`verify`] (whether a signature over a payload is a trusted key's, and whose),
//! [`cosign`] (an OCI artifact's cosign signature, by a trusted cosign key), [`dsse`]
//! (signed envelopes: tether's deployment records, sealed and opened), [`trusted_root`]
//! (a private Sigstore's authorities and the identities they may issue for),
//! [`provenance`]
//! (a Helm chart's `.prov` file, by a trusted OpenPGP key), [`sigstore`] (a Sigstore
//! bundle, by a cosign key or a private Sigstore's certificate) and [`sign`] (an SSH
//! signature made with tether's own key, as git's `gpg.format=ssh` makes it).
//! Where the payloads come from (a commit, a tag, a chart) is the engine's
//! (`tether_engine::git::verify`, `tether_engine::writeback`, its chart pulls).
//!
//! Pure but for the signing key's random nonce where its algorithm takes one:
//! `clippy.toml` forbids the clock, the environment and the filesystem. A crate of its
//! own, beside the core, so that the cryptography (RustCrypto's `ssh-key`, rPGP)
//! stays out of the core's dependencies.

#![warn(clippy::too_many_lines)]

pub mod cosign;
pub mod dsse;
pub mod provenance;
pub mod sign;
pub mod sigstore;
pub mod trusted_keys;
pub mod trusted_root;
pub mod verify;
