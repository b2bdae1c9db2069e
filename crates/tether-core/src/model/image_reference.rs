//! What an image reference is made of: the rules for its name, tag and digest, and
//! how `name:tag` splits.

/// An image name as Image models and ImagePolicies write it: not empty, lowercase,
/// no spaces.
pub fn is_valid_image_name(name: &str) -> bool {
    !name.is_empty()
        && !name
            .chars()
            .any(|c| c.is_whitespace() || c.is_ascii_uppercase())
}

/// A tag as registries accept it: letters, digits, `_`, `.` and `-`, at most 128,
/// not starting with `.` or `-`.
pub fn is_valid_tag(tag: &str) -> bool {
    !tag.is_empty()
        && tag.len() <= 128
        && !tag.starts_with(['.', '-'])
        && tag
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// `name:tag` into its name and tag: the tag is what follows the last `:` after the
/// last `/`, so `registry.local:5000/app` has none.
pub fn split_image_reference(reference: &str) -> (&str, Option<&str>) {
    let slash = reference.rfind('/').map_or(0, |i| i + 1);
    match reference[slash..].rfind(':') {
        Some(colon) => (
            &reference[..slash + colon],
            Some(&reference[slash + colon + 1..]),
        ),
        None => (reference, None),
    }
}

/// A valid digest: `sha256:` and 64 lowercase hex digits.
pub fn is_digest(text: &str) -> bool {
    text.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_sha256_in_lowercase_hex() {
        let hex = "a".repeat(64);
        assert!(is_digest(&format!("sha256:{hex}")));
        assert!(!is_digest(&format!("sha256:{}", "A".repeat(64))));
        assert!(!is_digest(&format!("sha512:{hex}")));
        assert!(!is_digest("sha256:abc"));
    }
}
