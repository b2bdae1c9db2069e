//! One value encrypted as sops writes it: `ENC[AES256_GCM,data:…,iv:…,tag:…,type:…]`,
//! AES-256-GCM under the file's data key with a 32-byte nonce, authenticated with the
//! value's path in the document (its "additional data"), so that a value moved to
//! another key does not decrypt.

use aes_gcm::aead::consts::U32;
use aes_gcm::aead::{Aead, KeyInit, OsRng, Payload, rand_core::RngCore};
use aes_gcm::aes::Aes256;
use aes_gcm::{AesGcm, Nonce};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use zeroize::Zeroizing;

/// sops's AES-GCM: 32-byte nonces instead of GCM's usual 12.
type SopsGcm = AesGcm<Aes256, U32>;

const TAG_LEN: usize = 16;

/// The data key of a file: 32 random bytes, wiped when dropped.
#[derive(Clone)]
pub struct DataKey(Zeroizing<[u8; 32]>);

impl DataKey {
    pub fn generate() -> Self {
        let mut key = Zeroizing::new([0u8; 32]);
        OsRng.fill_bytes(key.as_mut());
        DataKey(key)
    }

    /// A data key as the age payload gives it back; none unless it is 32 bytes.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let key: [u8; 32] = bytes.try_into().ok()?;
        Some(DataKey(Zeroizing::new(key)))
    }

    pub fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    fn cipher(&self) -> SopsGcm {
        let key: &[u8; 32] = &self.0;
        SopsGcm::new(key.into())
    }
}

/// What type a value had before it was encrypted (sops's `type:`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueType {
    Str,
    Int,
    Float,
    Bool,
    Bytes,
    Comment,
}

impl ValueType {
    pub fn name(self) -> &'static str {
        match self {
            ValueType::Str => "str",
            ValueType::Int => "int",
            ValueType::Float => "float",
            ValueType::Bool => "bool",
            ValueType::Bytes => "bytes",
            ValueType::Comment => "comment",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        [
            ValueType::Str,
            ValueType::Int,
            ValueType::Float,
            ValueType::Bool,
            ValueType::Bytes,
            ValueType::Comment,
        ]
        .into_iter()
        .find(|t| t.name() == name)
    }
}

/// The parts of an `ENC[…]` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sealed {
    data: Vec<u8>,
    iv: Vec<u8>,
    tag: Vec<u8>,
    pub value_type: ValueType,
}

/// Why a value could not be read or opened. Never holds the plain value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CipherError {
    #[error("the value is not in sops' format ENC[AES256_GCM,data:…,iv:…,tag:…,type:…]: {0}")]
    Format(&'static str),
    #[error(
        "the value does not decrypt with the file's data key (changed, or moved to another key)"
    )]
    Authentication,
    #[error("the decrypted value is not a valid {0}")]
    Type(&'static str),
}

/// Does this scalar look like a value sops encrypted?
pub fn is_sealed(text: &str) -> bool {
    text.starts_with("ENC[") && text.ends_with(']')
}

impl Sealed {
    pub fn parse(text: &str) -> Result<Self, CipherError> {
        let inner = text
            .strip_prefix("ENC[AES256_GCM,")
            .and_then(|t| t.strip_suffix(']'))
            .ok_or(CipherError::Format("it must start with ENC[AES256_GCM,"))?;
        let mut data = None;
        let mut iv = None;
        let mut tag = None;
        let mut value_type = None;
        for part in inner.split(',') {
            let (name, value) = part
                .split_once(':')
                .ok_or(CipherError::Format("a part without a name"))?;
            let decode = |v: &str| {
                BASE64
                    .decode(v)
                    .map_err(|_| CipherError::Format("a part is not base64"))
            };
            match name {
                "data" => data = Some(decode(value)?),
                "iv" => iv = Some(decode(value)?),
                "tag" => tag = Some(decode(value)?),
                "type" => {
                    value_type = Some(
                        ValueType::from_name(value)
                            .ok_or(CipherError::Format("an unknown type"))?,
                    )
                }
                _ => return Err(CipherError::Format("an unknown part")),
            }
        }
        let sealed = Sealed {
            data: data.ok_or(CipherError::Format("no data"))?,
            iv: iv.ok_or(CipherError::Format("no iv"))?,
            tag: tag.ok_or(CipherError::Format("no tag"))?,
            value_type: value_type.ok_or(CipherError::Format("no type"))?,
        };
        if sealed.iv.len() != 32 {
            return Err(CipherError::Format("the iv is not 32 bytes"));
        }
        if sealed.tag.len() != TAG_LEN {
            return Err(CipherError::Format("the tag is not 16 bytes"));
        }
        Ok(sealed)
    }

    /// The plain text, checked against the tag and `path` (sops's additional data).
    pub fn open(&self, key: &DataKey, path: &str) -> Result<Zeroizing<String>, CipherError> {
        let mut message = self.data.clone();
        message.extend_from_slice(&self.tag);
        let plain = key
            .cipher()
            .decrypt(
                Nonce::<U32>::from_slice(&self.iv),
                Payload {
                    msg: &message,
                    aad: path.as_bytes(),
                },
            )
            .map_err(|_| CipherError::Authentication)?;
        let plain = Zeroizing::new(plain);
        let text = String::from_utf8(plain.to_vec()).map_err(|_| CipherError::Type("text"))?;
        Ok(Zeroizing::new(text))
    }

    /// Encrypts `plain` (as sops spells a value of `value_type`) for `path`.
    pub fn seal(key: &DataKey, plain: &str, value_type: ValueType, path: &str) -> Self {
        let mut iv = vec![0u8; 32];
        OsRng.fill_bytes(&mut iv);
        // AES-GCM encryption of a byte slice cannot fail below its 64 GiB limit.
        let mut data = key
            .cipher()
            .encrypt(
                Nonce::<U32>::from_slice(&iv),
                Payload {
                    msg: plain.as_bytes(),
                    aad: path.as_bytes(),
                },
            )
            .unwrap_or_default();
        let tag = data.split_off(data.len().saturating_sub(TAG_LEN));
        Sealed {
            data,
            iv,
            tag,
            value_type,
        }
    }

    pub fn to_text(&self) -> String {
        format!(
            "ENC[AES256_GCM,data:{},iv:{},tag:{},type:{}]",
            BASE64.encode(&self.data),
            BASE64.encode(&self.iv),
            BASE64.encode(&self.tag),
            self.value_type.name()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_value_opens_only_with_its_key_and_path() {
        let key = DataKey::generate();
        let sealed = Sealed::seal(&key, "s3cr3t", ValueType::Str, "data:password:");
        let text = sealed.to_text();
        assert!(is_sealed(&text));
        assert!(!text.contains("s3cr3t"));
        let parsed = Sealed::parse(&text).unwrap();
        assert_eq!(parsed, sealed);
        assert_eq!(
            parsed.open(&key, "data:password:").unwrap().as_str(),
            "s3cr3t"
        );
        assert_eq!(
            parsed.open(&key, "data:user:"),
            Err(CipherError::Authentication)
        );
        assert_eq!(
            parsed.open(&DataKey::generate(), "data:password:"),
            Err(CipherError::Authentication)
        );
    }

    #[test]
    fn malformed_values_are_format_errors() {
        for text in [
            "ENC[AES256_GCM,data:!!,iv:AA==,tag:AA==,type:str]",
            "ENC[AES256_GCM,data:AA==,type:str]",
            "ENC[AES256_GCM,data:AA==,iv:AA==,tag:AA==,type:str]",
            "ENC[AES256_CBC,data:AA==]",
        ] {
            assert!(
                matches!(Sealed::parse(text), Err(CipherError::Format(_))),
                "{text}"
            );
        }
    }
}
