//! Where age keys come from outside a Source: a key file, the variables sops reads,
//! and sops' default key file. (A Source's keys come from its decryption Secret, in
//! the daemon.) Parsing the keys is the core's (`tether_sops::keys`).

use std::path::{Path, PathBuf};

use zeroize::Zeroizing;

use tether_sops::keys::{KEY_FILE_VARIABLE, KEY_TEXT_VARIABLES, KeyError, Keyring};

/// The keys of a file, and of the variables sops reads (`TETHER_AGE_KEY` first),
/// and sops' default key file if it exists. Every source found is used, as sops
/// does: a file encrypted to any of them opens.
pub fn keyring_from_environment(key_file: Option<&Path>) -> Result<Keyring, KeyError> {
    let mut keyring = Keyring::default();
    if let Some(path) = key_file {
        keyring.add(read_key_file(path)?);
    }
    for variable in KEY_TEXT_VARIABLES {
        if let Ok(text) = std::env::var(variable) {
            let text = Zeroizing::new(text);
            keyring.add(Keyring::parse(&text, &format!("${variable}"))?);
        }
    }
    if let Some(path) = std::env::var_os(KEY_FILE_VARIABLE) {
        keyring.add(read_key_file(Path::new(&path))?);
    }
    if let Some(path) = default_key_file().filter(|p| p.is_file()) {
        keyring.add(read_key_file(&path)?);
    }
    Ok(keyring)
}

/// sops' default key file: `$XDG_CONFIG_HOME/sops/age/keys.txt`, else
/// `~/.config/sops/age/keys.txt`.
fn default_key_file() -> Option<PathBuf> {
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(config.join("sops/age/keys.txt"))
}

fn read_key_file(path: &Path) -> Result<Keyring, KeyError> {
    let text = std::fs::read_to_string(path).map_err(|source| KeyError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    Keyring::parse(&Zeroizing::new(text), &path.display().to_string())
}
