//! `cellvisor config check|show` end to end: the real binary on real files.

mod common;

use common::{path_str, Run, World};

#[test]
fn check_lists_every_error_with_its_line_and_exits_2() {
    let world = World::with_config(
        "[sessions]\n\
         max-sesions = 2\n\
         max-sessions = \"four\"\n\
         heartbeat-interval = 5\n\
         \n\
         [limits]\n\
         max-rss = \"8MiB\"\n\
         [lua]\n\
         memory-limit = 256\n",
    );
    let path = world.config_path();
    let file = path_str(&path);
    let run = world.run(&["config", "check", file]);
    run.assert_code(2);
    for expected in [
        format!("{file}:2:1: sessions.max-sesions: unknown key; did you mean `max-sessions`?"),
        format!("{file}:3:16: sessions.max-sessions: expected an integer from 1 to 10000"),
        format!("{file}:4:22: sessions.heartbeat-interval: a duration needs a unit"),
        format!(
            "{file}:7:11: limits.max-rss: 8MiB is out of range: expected a size of at least 16MiB"
        ),
        format!("{file}:9:16: lua.memory-limit: a size needs a unit"),
    ] {
        assert!(
            run.stderr.contains(&expected),
            "missing {expected}\n{}",
            run.stderr
        );
    }
    assert!(run.stderr.contains("5 errors"), "{}", run.stderr);

    // The same errors stop any other command that needs the configuration.
    let show = world.run(&["config", "show"]);
    show.assert_code(2);
    assert!(
        show.stderr.contains(&format!("{file}:3:16:")),
        "{}",
        show.stderr
    );
}

#[test]
fn check_passes_a_good_file_and_no_file() {
    let world = World::with_config("[sessions]\nmax-sessions = 2\nidle-timeout = \"2m\"\n");
    let path = world.config_path();
    let run = world.run(&["config", "check", path_str(&path)]);
    run.assert_code(0);
    assert_eq!(run.stdout, format!("{}: ok\n", path_str(&path)));

    let empty_home = world.dir.path().join("xdg");
    let run = Run::from(
        world
            .command()
            .env_remove("CELLVISOR_CONFIG")
            .env("XDG_CONFIG_HOME", &empty_home)
            .args(["config", "check"])
            .output()
            .expect("run cellvisor"),
    );
    run.assert_code(0);
    assert_eq!(run.stdout, "no config file; defaults in force\n");
}

#[test]
fn check_reports_bad_override_variables() {
    let world = World::new();
    let run = Run::from(
        world
            .command()
            .env("CELLVISOR_SESSIONS__MAX_SESIONS", "8")
            .env("CELLVISOR_SESSIONS__IDLE_TIMEOUT", "soon")
            .args(["config", "check"])
            .output()
            .expect("run cellvisor"),
    );
    run.assert_code(2);
    assert!(
        run.stderr.contains(
            "CELLVISOR_SESSIONS__MAX_SESIONS: unknown override variable; \
             did you mean `CELLVISOR_SESSIONS__MAX_SESSIONS`?"
        ),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(
            "CELLVISOR_SESSIONS__IDLE_TIMEOUT: sessions.idle-timeout: cannot read \"soon\""
        ),
        "{}",
        run.stderr
    );
}

#[test]
fn show_gives_every_value_with_its_source_and_parses_back() {
    let world =
        World::with_config("[sessions]\nmax-sessions = 2\n\n[limits]\nmax-rss = \"512MiB\"\n");
    let path = world.config_path();
    let file = path_str(&path);
    let run = Run::from(
        world
            .command()
            .env("CELLVISOR_SESSIONS__IDLE_TIMEOUT", "10s")
            .args(["config", "show"])
            .output()
            .expect("run cellvisor"),
    );
    run.assert_code(0);
    for expected in [
        format!("max-sessions = 2  # file {file}:2; applies at once\n"),
        format!("max-rss = \"512MiB\"  # file {file}:5; applies at once\n"),
        "idle-timeout = \"10s\"  # env CELLVISOR_SESSIONS__IDLE_TIMEOUT; applies at once\n"
            .to_string(),
        "heartbeat-interval = \"5s\"  # default; applies at once\n".to_string(),
        "# address-space = (unset)  # default; applies to new workers\n".to_string(),
    ] {
        assert_shows(&run, &expected);
    }

    // What show prints is a config file that checks clean and shows the same values.
    let shown = world.dir.path().join("shown.toml");
    std::fs::write(&shown, &run.stdout).expect("write shown config");
    let again = world.run(&["config", "show", "--config", path_str(&shown)]);
    again.assert_code(0);
    let values = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|line| !line.starts_with('#'))
            .map(|line| line.split("  #").next().unwrap_or(line).to_string())
            .collect()
    };
    assert_eq!(values(&again.stdout), values(&run.stdout));
}

#[test]
fn show_says_when_a_reload_applies_each_key() {
    let world = World::with_config("[daemon]\nidle-exit = \"2m\"\n");
    let path = world.config_path();
    let file = path_str(&path);
    let run = world.run(&["config", "show"]);
    run.assert_code(0);
    assert!(
        run.stdout
            .contains("when a reload (config/reload or\n# SIGHUP) applies"),
        "{}",
        run.stdout
    );
    for expected in [
        format!("idle-exit = \"2m\"  # file {file}:2; applies at once\n"),
        "interrupt-grace = \"5s\"  # default; applies to new cells\n".to_string(),
        "max-pending-requests = 1024  # default; applies to new connections\n".to_string(),
        "start-timeout = \"15s\"  # default; applies to new workers\n".to_string(),
        "# socket = (unset)  # default; applies at restart\n".to_string(),
    ] {
        assert_shows(&run, &expected);
    }
}

/// `config show` printed the line `expected` (with its newline).
fn assert_shows(run: &Run, expected: &str) {
    assert!(
        run.stdout.contains(expected),
        "missing {expected}\n{}",
        run.stdout
    );
}
