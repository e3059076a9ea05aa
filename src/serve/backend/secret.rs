//! The session's backend secret, which every request carries: kept in the session folder
//! (owner-only) so that Label Studio's saved connection outlives a restart.

use super::settings::SECRET_FILE;
use crate::error::{Error, Result};
use crate::serve::http;
use std::path::Path;

/// The session's backend secret: read from `DIR/label-studio-secret`, or made (128 random
/// bits) and written there with owner-only permissions on first use.
pub fn secret(dir: &Path) -> Result<String> {
    let path = dir.join(SECRET_FILE);
    match std::fs::read_to_string(&path) {
        Ok(s) => {
            let s = s.trim().to_string();
            if s.len() < 16 || !s.bytes().all(|b| b.is_ascii_alphanumeric()) {
                return Err(Error::state(
                    &path,
                    "not a backend secret (at least 16 letters or digits); delete it to make \
                     a new one",
                ));
            }
            Ok(s)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let s = http::new_token()?;
            // Readable by its owner only from the moment it exists, then renamed into place.
            let tmp = dir.join(format!(".{SECRET_FILE}.{}", std::process::id()));
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create(true).truncate(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::OpenOptionsExt;
                options.mode(0o600);
            }
            let written = options
                .open(&tmp)
                .and_then(|mut f| {
                    use std::io::Write;
                    f.write_all(format!("{s}\n").as_bytes())?;
                    f.sync_all()
                })
                .and_then(|()| std::fs::rename(&tmp, &path));
            if let Err(e) = written {
                let _ = std::fs::remove_file(&tmp);
                return Err(Error::io(&path, e));
            }
            Ok(s)
        }
        Err(e) => Err(Error::io(&path, e)),
    }
}
