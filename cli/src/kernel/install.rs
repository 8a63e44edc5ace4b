//! `cellvisor kernel install`: the kernelspecs (`cellvisor-python`, `cellvisor-javascript`,
//! `cellvisor-lua`) written where Jupyter looks for them, each running this binary (by its
//! absolute path) as a kernel of its language.

use crate::jupyter::mapping;
use cellvisor::Language;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// Where the kernelspecs go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// The user's Jupyter data directory: `$JUPYTER_DATA_DIR`, else
    /// `$XDG_DATA_HOME/jupyter`, else `~/.local/share/jupyter`.
    User,
    /// `share/jupyter` under the Python environment in use: `$VIRTUAL_ENV`, else the
    /// `sys.prefix` of the `python3` on `PATH`.
    SysPrefix,
    /// `share/jupyter` under a prefix.
    Prefix(PathBuf),
}

/// Why the kernelspecs cannot be installed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// A language that is none of cellvisor's.
    #[error(
        "unknown language {0:?} in --languages: the languages are py, js and lua (comma-separated)"
    )]
    Language(String),
    /// `--languages` named none.
    #[error("--languages names no language: give some of py, js and lua, comma-separated")]
    NoLanguage,
    /// A session name that cannot be one.
    #[error("--session {0:?} is no session name: it must be non-empty, without spaces or control characters")]
    Session(String),
    /// The user's data directory is unknown.
    #[error("cannot find the user's Jupyter data directory: neither JUPYTER_DATA_DIR nor HOME is set; use --prefix DIR")]
    NoHome,
    /// `--sys-prefix` without a Python environment to find.
    #[error("cannot find the Python environment for --sys-prefix: VIRTUAL_ENV is not set and `python3 -c 'import sys; print(sys.prefix)'` failed ({0}); use --prefix DIR")]
    NoPython(String),
    /// A file could not be written.
    #[error("cannot write {path}: {why}")]
    Write { path: PathBuf, why: String },
}

/// The kernelspec's name for `language`.
pub fn spec_name(language: Language) -> &'static str {
    match language {
        Language::Python => "cellvisor-python",
        Language::JavaScript => "cellvisor-javascript",
        Language::Lua => "cellvisor-lua",
    }
}

/// The languages of `--languages py,js,lua` (any of cellvisor's names for each).
pub fn parse_languages(list: &str) -> Result<Vec<Language>, InstallError> {
    let mut languages = Vec::new();
    for word in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        let language = word
            .parse::<Language>()
            .ok()
            .or_else(|| mapping::language_of(word))
            .ok_or_else(|| InstallError::Language(word.to_string()))?;
        if !languages.contains(&language) {
            languages.push(language);
        }
    }
    if languages.is_empty() {
        return Err(InstallError::NoLanguage);
    }
    Ok(languages)
}

/// Checks a `--session` name before it goes into a kernelspec.
pub fn check_session(name: &str) -> Result<(), InstallError> {
    if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(InstallError::Session(name.to_string()));
    }
    Ok(())
}

/// The `kernel.json` of `language`'s kernelspec, running `program`.
pub fn kernel_json(language: Language, program: &Path, session: Option<&str>) -> Value {
    let mut argv = vec![
        program.display().to_string(),
        "kernel".into(),
        "--connection-file".into(),
        "{connection_file}".into(),
        "--language".into(),
        language.short_name().into(),
    ];
    let mut display_name = format!("{} (cellvisor)", mapping::display_language(language));
    if let Some(session) = session {
        argv.extend(["--session".into(), session.to_string()]);
        display_name = format!(
            "{} (cellvisor session {session})",
            mapping::display_language(language)
        );
    }
    json!({
        "argv": argv,
        "display_name": display_name,
        "language": mapping::language_info(language)["name"],
        "interrupt_mode": "message",
        "metadata": {"cellvisor": {"language": language.short_name(), "session": session}},
    })
}

/// The `kernels` directory of `place`; `env` reads the environment.
pub fn kernels_dir(
    place: &Place,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<PathBuf, InstallError> {
    let set = |name: &str| env(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    let data = match place {
        Place::Prefix(prefix) => prefix.join("share/jupyter"),
        Place::User => match (set("JUPYTER_DATA_DIR"), set("XDG_DATA_HOME"), set("HOME")) {
            (Some(dir), _, _) => dir,
            (None, Some(xdg), _) => xdg.join("jupyter"),
            (None, None, Some(home)) => home.join(".local/share/jupyter"),
            (None, None, None) => return Err(InstallError::NoHome),
        },
        Place::SysPrefix => match set("VIRTUAL_ENV") {
            Some(venv) => venv.join("share/jupyter"),
            None => python_prefix()?.join("share/jupyter"),
        },
    };
    Ok(data.join("kernels"))
}

fn python_prefix() -> Result<PathBuf, InstallError> {
    let out = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.prefix)"])
        .output()
        .map_err(|e| InstallError::NoPython(e.to_string()))?;
    let prefix = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || prefix.is_empty() {
        return Err(InstallError::NoPython(format!(
            "it exited with {}",
            out.status
        )));
    }
    Ok(PathBuf::from(prefix))
}

/// Writes the kernelspecs of `languages` into `dir` (a `kernels` directory); the
/// directories written.
pub fn install(
    dir: &Path,
    languages: &[Language],
    program: &Path,
    session: Option<&str>,
) -> Result<Vec<PathBuf>, InstallError> {
    let mut written = Vec::new();
    for language in languages {
        let spec_dir = dir.join(spec_name(*language));
        let path = spec_dir.join("kernel.json");
        let write_error = |e: std::io::Error| InstallError::Write {
            path: path.clone(),
            why: e.to_string(),
        };
        std::fs::create_dir_all(&spec_dir).map_err(write_error)?;
        let text = serde_json::to_string_pretty(&kernel_json(*language, program, session))
            .unwrap_or_default();
        std::fs::write(&path, text + "\n").map_err(write_error)?;
        written.push(spec_dir);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernelspec_runs_this_binary_as_a_kernel_of_its_language() {
        let spec = kernel_json(Language::Lua, Path::new("/opt/cv/cellvisor"), None);
        assert_eq!(spec["argv"][0], "/opt/cv/cellvisor");
        assert_eq!(
            spec["argv"],
            json!([
                "/opt/cv/cellvisor",
                "kernel",
                "--connection-file",
                "{connection_file}",
                "--language",
                "lua"
            ])
        );
        assert_eq!(spec["interrupt_mode"], "message");
        assert_eq!(spec["language"], "lua");
        let attached = kernel_json(Language::Python, Path::new("/cv"), Some("agent-1"));
        let argv = attached["argv"].as_array().unwrap();
        assert_eq!(
            argv[argv.len() - 2..],
            [json!("--session"), json!("agent-1")]
        );
        assert!(attached["display_name"]
            .as_str()
            .unwrap()
            .contains("agent-1"));
    }

    #[test]
    fn places_follow_jupyters_data_directories() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let home = env(&[("HOME", "/home/u")]);
        assert_eq!(
            kernels_dir(&Place::User, &home).unwrap(),
            Path::new("/home/u/.local/share/jupyter/kernels")
        );
        let data = env(&[("HOME", "/home/u"), ("JUPYTER_DATA_DIR", "/j")]);
        assert_eq!(
            kernels_dir(&Place::User, &data).unwrap(),
            Path::new("/j/kernels")
        );
        let xdg = env(&[("HOME", "/home/u"), ("XDG_DATA_HOME", "/x")]);
        assert_eq!(
            kernels_dir(&Place::User, &xdg).unwrap(),
            Path::new("/x/jupyter/kernels")
        );
        assert!(matches!(
            kernels_dir(&Place::User, &env(&[])),
            Err(InstallError::NoHome)
        ));
        let venv = env(&[("VIRTUAL_ENV", "/venv")]);
        assert_eq!(
            kernels_dir(&Place::SysPrefix, &venv).unwrap(),
            Path::new("/venv/share/jupyter/kernels")
        );
        assert_eq!(
            kernels_dir(&Place::Prefix("/p".into()), &env(&[])).unwrap(),
            Path::new("/p/share/jupyter/kernels")
        );
    }

    #[test]
    fn bad_languages_and_sessions_are_named() {
        assert_eq!(
            parse_languages("py, js,lua,py").unwrap(),
            vec![Language::Python, Language::JavaScript, Language::Lua]
        );
        assert_eq!(
            parse_languages("javascript").unwrap(),
            vec![Language::JavaScript]
        );
        let err = parse_languages("py,ruby").unwrap_err().to_string();
        assert!(
            err.contains("\"ruby\"") && err.contains("py, js and lua"),
            "{err}"
        );
        assert!(matches!(
            parse_languages(" , "),
            Err(InstallError::NoLanguage)
        ));
        assert!(check_session("agent-1").is_ok());
        assert!(check_session("").is_err() && check_session("a b").is_err());
    }

    #[test]
    fn install_writes_one_directory_per_language() {
        let dir = tempfile::tempdir().unwrap();
        let written = install(
            dir.path(),
            &[Language::Python, Language::Lua],
            Path::new("/cv"),
            None,
        )
        .unwrap();
        assert_eq!(written.len(), 2);
        let text = std::fs::read_to_string(dir.path().join("cellvisor-lua/kernel.json")).unwrap();
        let spec: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(spec["argv"][5], "lua");
        let blocked = dir.path().join("file");
        std::fs::write(&blocked, "").unwrap();
        let err = install(&blocked, &[Language::Python], Path::new("/cv"), None).unwrap_err();
        assert!(err.to_string().contains("cannot write"), "{err}");
    }
}
