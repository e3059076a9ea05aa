//! Catching up with Label Studio: the answers a person gave while the backend was down (or
//! whose webhook failed: Label Studio sends each once and never again) are read back from
//! the project itself, through Label Studio's API with a token the user gives, and taught by
//! the same checks as a webhook's. The backend does it when it starts and on "Start
//! Training".
//!
//! One request reads the whole project: `GET /api/projects/{id}/export?exportType=JSON`
//! (every annotated task with its annotations, `ground_truth` marks included; about 2.6 s and
//! 2 MB for 2,000 tasks on Label Studio 1.23.2). Each task's answer is decided as an export's
//! is ([`crate::label_studio::export`]: the ground truth, else the majority), and a task that
//! cannot be taught (no item of the pool, a tie) is reported by itself, never stopping the
//! others.

use crate::error::{Error, Result};
use crate::label_studio::export::{project_answers_of, ExportRow, ImageNamer};
use std::io::Read;
use std::time::Duration;

/// The largest project export read (10,000 tasks are about 10 MB).
const MAX_EXPORT: u64 = 256 << 20;

/// Where Label Studio is and how to speak to it: its URL and a user's API token (the legacy
/// token of the user's "Account & Settings" page, sent as `Authorization: Token ...`).
#[derive(Clone)]
pub struct LabelStudioApi {
    /// `http://HOST:PORT` of Label Studio.
    pub url: String,
    /// The API token.
    pub token: String,
}

impl std::fmt::Debug for LabelStudioApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("LabelStudioApi")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl LabelStudioApi {
    /// Checks the URL (`http://` or `https://`, a host) and the token (non-empty, one line).
    pub fn new(url: &str, token: &str) -> Result<LabelStudioApi> {
        let url = url.trim().trim_end_matches('/');
        let host = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"))
            .unwrap_or("");
        if host.is_empty() || host.contains(char::is_whitespace) {
            return Err(Error::config(
                "label_studio_url",
                format!("`{url}` is not Label Studio's address: give http://HOST:PORT"),
            ));
        }
        let token = token.trim();
        if token.is_empty() || token.contains(|c: char| c.is_control() || c == ' ') {
            return Err(Error::config(
                "label_studio_token",
                "the API token is empty or not one word: copy it from Label Studio's Account \
                 & Settings page",
            ));
        }
        Ok(LabelStudioApi {
            url: url.to_string(),
            token: token.to_string(),
        })
    }

    /// Every answer of `project` (see the module docs), with the tasks that cannot be taught
    /// described one by one. `images` maps a task without `alkit_id` to its item.
    pub fn answers(
        &self,
        project: u64,
        images: Option<ImageNamer<'_>>,
    ) -> Result<(Vec<ExportRow>, Vec<String>)> {
        let url = format!("{}/api/projects/{project}/export?exportType=JSON", self.url);
        let failed = |why: String| {
            Error::config(
                "label_studio_url",
                format!("reading project {project}'s annotations from {url}: {why}"),
            )
        };
        let agent = ureq::AgentBuilder::new()
            .redirects(0)
            .timeout_connect(Duration::from_secs(10))
            .timeout_read(Duration::from_secs(300))
            .timeout(Duration::from_secs(900))
            .user_agent(concat!("alkit/", env!("CARGO_PKG_VERSION")))
            .build();
        let resp = match agent
            .get(&url)
            .set("Authorization", &format!("Token {}", self.token))
            .call()
        {
            Ok(r) => r,
            Err(ureq::Error::Status(401 | 403, _)) => {
                return Err(failed(
                    "the token was refused: give a user's legacy API token (Account & \
                     Settings), with legacy tokens enabled"
                        .into(),
                ))
            }
            Err(ureq::Error::Status(404, _)) => {
                return Err(failed(format!("Label Studio has no project {project}")))
            }
            Err(e) => return Err(failed(e.to_string())),
        };
        if resp.status() != 200 {
            let to = resp.header("Location").unwrap_or("nowhere").to_string();
            return Err(failed(format!(
                "the answer is {} (to {to}), not the export: give Label Studio's own address",
                resp.status()
            )));
        }
        let mut body = Vec::new();
        resp.into_reader()
            .take(MAX_EXPORT + 1)
            .read_to_end(&mut body)
            .map_err(|e| failed(e.to_string()))?;
        if body.len() as u64 > MAX_EXPORT {
            return Err(failed(format!("an export of more than {MAX_EXPORT} bytes")));
        }
        project_answers_of(&body, images).map_err(|e| {
            failed(format!(
                "not Label Studio's JSON export (a list of tasks): {e}"
            ))
        })
    }
}
