//! Which daemon a command talks to: the local one on its Unix socket, or a remote one on its
//! network listener (`--connect URL` with `--token-file` and `--tls-ca`, or their
//! environment variables), and what to say when reaching it fails.

use cellvisor::daemon::client::{ClientError, Remote, Token};
use std::path::PathBuf;

/// Environment variable of `--connect`.
pub const CONNECT_ENV: &str = "CELLVISOR_CONNECT";
/// Environment variable of `--token-file`.
pub const TOKEN_FILE_ENV: &str = "CELLVISOR_TOKEN_FILE";
/// Environment variable of `--tls-ca`.
pub const TLS_CA_ENV: &str = "CELLVISOR_TLS_CA";

/// The network flags as given on the command line.
#[derive(Debug, Default, Clone)]
pub struct RemoteFlags {
    /// `--connect URL`.
    pub connect: Option<String>,
    /// `--token-file F`.
    pub token_file: Option<PathBuf>,
    /// `--tls-ca F`.
    pub tls_ca: Option<PathBuf>,
    /// Whether `--socket` was given too (the two name different daemons).
    pub socket_given: bool,
}

/// A flag's value, else its environment variable's (an empty one counts as unset), with how
/// to name where it came from.
fn flag_or_env(flag: Option<String>, name: &str, env: &str) -> Option<(String, String)> {
    if let Some(value) = flag {
        return Some((value.clone(), format!("--{name} {value}")));
    }
    let value = std::env::var(env).ok().filter(|v| !v.is_empty())?;
    Some((value.clone(), format!("${env} ({value})")))
}

impl RemoteFlags {
    /// The remote daemon these flags name, bound to `session` when given; `None` for the
    /// local one. Errors are bad input (usage errors).
    pub fn remote(&self, session: Option<&str>) -> Result<Option<Remote>, String> {
        let Some((url, _)) = flag_or_env(self.connect.clone(), "connect", CONNECT_ENV) else {
            if self.token_file.is_some() || self.tls_ca.is_some() {
                return Err(format!(
                    "--token-file and --tls-ca are for a daemon on the network: give its URL \
                     with --connect wss://HOST:PORT (or ${CONNECT_ENV})"
                ));
            }
            return Ok(None);
        };
        if self.socket_given {
            return Err(format!(
                "--socket names a local daemon and --connect (or ${CONNECT_ENV}) a remote one: \
                 give one of them"
            ));
        }
        let mut remote = Remote::new(&url).map_err(|e| e.to_string())?;
        let token_file = self.token_file.clone().map(|p| p.display().to_string());
        if let Some((path, source)) = flag_or_env(token_file, "token-file", TOKEN_FILE_ENV) {
            let token = Token::from_file(std::path::Path::new(&path), Some(&source))
                .map_err(|e| e.to_string())?;
            remote.token = Some(token);
        }
        let tls_ca = self.tls_ca.clone().map(|p| p.display().to_string());
        remote.ca_file = flag_or_env(tls_ca, "tls-ca", TLS_CA_ENV).map(|(path, _)| path.into());
        remote.session = session.map(str::to_string);
        Ok(Some(remote))
    }
}

/// A failure to reach the daemon, in words, with the flag that usually fixes it.
pub fn describe(error: &ClientError) -> String {
    match error {
        ClientError::Connect { .. } => format!("{error} (is `cellvisor serve` running?)"),
        ClientError::Unauthorized { token: None, .. } => format!(
            "{error}: pass the daemon's token with --token-file FILE (or ${TOKEN_FILE_ENV})"
        ),
        ClientError::Unauthorized { token: Some(_), .. } => {
            format!("{error}; pass the right one with --token-file FILE (or ${TOKEN_FILE_ENV})")
        }
        ClientError::Tls { reason, .. } if reason.contains("not trusted") => {
            format!("{error} [the CA file is given with --tls-ca FILE (or ${TLS_CA_ENV})]")
        }
        _ => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(connect: Option<&str>) -> RemoteFlags {
        RemoteFlags {
            connect: connect.map(str::to_string),
            ..RemoteFlags::default()
        }
    }

    #[test]
    fn network_flags_without_a_url_are_refused() {
        if std::env::var_os(CONNECT_ENV).is_some() {
            return; // the caller's environment names a daemon
        }
        assert!(flags(None).remote(None).unwrap().is_none());
        let mut lone = flags(None);
        lone.token_file = Some("t".into());
        assert!(lone.remote(None).unwrap_err().contains("give its URL"));
    }

    #[test]
    fn a_url_and_a_socket_are_one_too_many() {
        let mut both = flags(Some("wss://127.0.0.1:7420"));
        both.socket_given = true;
        assert!(both.remote(None).unwrap_err().contains("give one of them"));
    }

    #[test]
    fn a_bad_url_and_an_unreadable_token_file_are_named() {
        let scheme = flags(Some("http://h:1")).remote(None).unwrap_err();
        assert!(scheme.contains("`http` is not ws or wss"), "{scheme}");
        let mut token = flags(Some("wss://h:1"));
        token.token_file = Some("/nonexistent/token".into());
        let message = token.remote(Some("s")).unwrap_err();
        assert!(
            message.contains("--token-file /nonexistent/token") && message.contains("cannot read"),
            "{message}"
        );
    }

    #[test]
    fn a_refused_or_missing_token_names_the_flag() {
        let missing = ClientError::Unauthorized {
            url: "wss://h:1/v1/rpc".into(),
            token: None,
        };
        assert!(describe(&missing).contains("--token-file FILE (or $CELLVISOR_TOKEN_FILE)"));
        let wrong = ClientError::Unauthorized {
            url: "wss://h:1/v1/rpc".into(),
            token: Some("--token-file /t".into()),
        };
        let message = describe(&wrong);
        assert!(
            message.contains("refused the token from --token-file /t"),
            "{message}"
        );
    }
}
