//! `cellvisor check`: run suites of scored cells and print (or write) the run summary.

use super::{usage_error, Globals};
use crate::check::report_color::{self, ColorChoice};
use crate::check::{self, report, suite, RunOptions, Suite, Variant};
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// Case files (.toml or .json), notebooks (.ipynb, each scored against its stored
    /// outputs), or directories whose *.toml / *.json / *.ipynb files are taken.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Write per-case artifacts and summary.json under DIR.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Run the suites under a configuration file as a named variant, on a supervisor of its
    /// own (repeat for several; replaces the variants the suites declare).
    #[arg(long = "variant", value_name = "NAME=CONFIG")]
    variants: Vec<String>,
    /// Run every case N times.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    repeat: u32,
    /// Run up to K cases at once (each in its own session; at most `sessions.max-sessions`).
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=256))]
    concurrency: u64,
    /// Print the run summary as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Accept workspace seeds outside their case file's directory (absolute paths, `../`).
    #[arg(long)]
    allow_outside_seeds: bool,
    /// Exit with status 3 when a case scores below SCORE (0 to 1); without it, low scores
    /// are reported and do not fail the run.
    #[arg(long, value_name = "SCORE", value_parser = parse_fail_under)]
    fail_under: Option<f64>,
    /// Colour the table: `auto` (on a terminal, unless NO_COLOR is set), `always`, `never`.
    #[arg(long, value_name = "WHEN", value_enum, default_value_t = ColorChoice::Auto)]
    color: ColorChoice,
}

/// `--fail-under`: a number from 0 to 1.
fn parse_fail_under(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number; give a score from 0 to 1, e.g. 0.8"))?;
    if (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(format!(
            "{value} is not in 0..1; give a score from 0 to 1, e.g. 0.8"
        ))
    }
}

/// Exit status when a case did not run as written (or the run broke).
const EXIT_INCOMPLETE: i32 = 1;
/// Exit status when every case ran but one scored below `--fail-under`.
const EXIT_BELOW_BAR: i32 = 3;

/// The exit status of a finished run: 1 when a case did not run as written, else 3 when a
/// case scored below `fail_under`, else 0. Prints which cases fell below the bar.
fn verdict(summary: &check::summary::RunSummary, fail_under: Option<f64>) -> i32 {
    if summary.totals.incomplete > 0 {
        return EXIT_INCOMPLETE;
    }
    let Some(bar) = fail_under else { return 0 };
    let below = check::notebook_summary::below_bar(summary, bar);
    if below.is_empty() {
        return 0;
    }
    eprintln!(
        "below --fail-under {bar}: {} case run{}: {}",
        below.len(),
        if below.len() == 1 { "" } else { "s" },
        below.join(", ")
    );
    EXIT_BELOW_BAR
}

/// The refusal of the first case whose workspace seed lies outside its case file's directory.
fn outside_seed(suites: &[Suite]) -> Option<String> {
    suites.iter().find_map(|suite| {
        let dir = suite
            .path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        suite.cases.iter().find_map(|case| {
            let seed = case.workspace.as_deref()?;
            check::workspace::seed_outside(dir, seed).then(|| {
                format!(
                    "{}: case {:?}: workspace seed {} is outside the suite's directory {}; \
                     seeds are copied into every workspace and into --out, so only the \
                     suite's own are taken (pass --allow-outside-seeds to take it anyway)",
                    suite.path.display(),
                    case.id,
                    seed.display(),
                    dir.display()
                )
            })
        })
    })
}

pub async fn run(args: CheckArgs, globals: &Globals) -> i32 {
    let suites = match suite::load_all(&args.paths) {
        Ok(suites) => suites,
        Err(err) => return usage_error(err),
    };
    if !args.allow_outside_seeds {
        if let Some(message) = outside_seed(&suites) {
            return usage_error(message);
        }
    }
    let variants = match variants(&args.variants, &suites, globals) {
        Ok(variants) => variants,
        Err(message) => return usage_error(message),
    };
    if let Some(out) = &args.out {
        if let Err(err) = std::fs::create_dir_all(out) {
            return usage_error(format!("cannot create --out {}: {err}", out.display()));
        }
    }
    let requested = usize::try_from(args.concurrency).unwrap_or(usize::MAX);
    for variant in &variants {
        let effective = check::run::effective_concurrency(requested, &variant.config);
        if effective < requested {
            eprintln!(
                "note: variant {}: --concurrency {requested} lowered to {effective}, its \
                 sessions.max-sessions",
                variant.name
            );
        }
    }
    let total: usize =
        suites.iter().map(|s| s.cases.len()).sum::<usize>() * args.repeat as usize * variants.len();
    let progress = progress_bar(total as u64);
    let options = RunOptions {
        variants,
        repeat: args.repeat,
        concurrency: requested,
        out: args.out.clone(),
        worker_exe: None,
        runtime_dir: None,
    };
    let mut results = Vec::new();
    let outcome = {
        let run = check::run(&suites, &options, |result| {
            progress.set_message(format!("done: {}/{}", result.suite, result.id));
            progress.inc(1);
            results.push(result);
        });
        // Ctrl-C stops the run (dropping it stops the cells and removes their workspaces)
        // and still reports the cases that finished.
        tokio::select! {
            outcome = run => Some(outcome),
            _ = tokio::signal::ctrl_c() => None,
        }
    };
    progress.finish_and_clear();
    let interrupted = match outcome {
        Some(Ok(())) => false,
        Some(Err(err)) => {
            eprintln!("error: {err}");
            return EXIT_INCOMPLETE;
        }
        None => true,
    };
    let summary = check::summarize(&results);
    if let Some(out) = &args.out {
        if let Err(err) = check::artifacts::write_summary(out, &summary) {
            eprintln!(
                "error: cannot write the summary into {}: {err}",
                out.display()
            );
            return 1;
        }
    }
    if args.json {
        match serde_json::to_string_pretty(&summary) {
            Ok(json) => println!("{json}"),
            Err(err) => {
                eprintln!("error: cannot print the summary: {err}");
                return 1;
            }
        }
    } else {
        let table = report::format_table(&summary);
        let colored = args.color.enabled(
            std::io::stdout().is_terminal(),
            std::env::var("NO_COLOR").ok().as_deref(),
            std::env::var("TERM").ok().as_deref(),
        );
        if colored {
            print!("{}", report_color::colorize(&table));
        } else {
            print!("{table}");
        }
        if let Some(out) = &args.out {
            println!("artifacts: {}", out.display());
        }
    }
    if interrupted {
        eprintln!(
            "interrupted: {} of {total} case runs finished",
            summary.totals.count
        );
        return EXIT_INTERRUPTED;
    }
    verdict(&summary, args.fail_under)
}

/// Exit status after Ctrl-C (128 + SIGINT, as shells report it).
const EXIT_INTERRUPTED: i32 = 130;

/// The variants to run: `--variant` flags, else those the suites declare, else the
/// configuration in force as `default`.
fn variants(flags: &[String], suites: &[Suite], globals: &Globals) -> Result<Vec<Variant>, String> {
    let mut named: Vec<(String, PathBuf)> = Vec::new();
    if flags.is_empty() {
        for suite in suites {
            for (name, path) in &suite.variants {
                match named.iter().find(|(n, _)| n == name) {
                    Some((_, other)) if other != path => {
                        return Err(format!(
                            "variant {name:?} is declared as {} and as {} (in {}); \
                             give it one config",
                            other.display(),
                            path.display(),
                            suite.path.display()
                        ))
                    }
                    Some(_) => {}
                    None => named.push((name.clone(), path.clone())),
                }
            }
        }
    }
    for flag in flags {
        let Some((name, path)) = flag.split_once('=') else {
            return Err(format!(
                "--variant {flag:?}: expected NAME=CONFIG, for example --variant small=small.toml"
            ));
        };
        if !suite::is_variant_name(name) {
            return Err(format!("--variant: {}", suite::variant_name_error(name)));
        }
        if named.iter().any(|(n, _)| n == name) {
            return Err(format!("--variant {name:?} is given twice"));
        }
        named.push((name.to_string(), PathBuf::from(path)));
    }
    if named.is_empty() {
        let config = globals.load_config()?;
        return Ok(vec![Variant {
            name: check::run::DEFAULT_VARIANT.into(),
            config,
        }]);
    }
    named
        .into_iter()
        .map(|(name, path)| {
            cellvisor_config::load_effective(Some(&path), cellvisor_config::env_overrides())
                .map(|effective| Variant {
                    name: name.clone(),
                    config: effective.config,
                })
                .map_err(|err| format!("variant {name}: {err}"))
        })
        .collect()
}

/// A progress bar on stderr while cases run; drawn only when stderr is a terminal.
fn progress_bar(total: u64) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{spinner} [{bar:30}] {pos}/{len} cases  {elapsed}  {wide_msg}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::summary::tests::result;

    #[test]
    fn fail_under_takes_a_score_from_0_to_1() {
        assert_eq!(parse_fail_under("0.8"), Ok(0.8));
        assert_eq!(parse_fail_under("0"), Ok(0.0));
        assert_eq!(parse_fail_under("1"), Ok(1.0));
        for bad in ["1.5", "-0.1", "NaN", "high", ""] {
            let err = parse_fail_under(bad).unwrap_err();
            assert!(err.contains("give a score from 0 to 1"), "{bad}: {err}");
        }
    }

    #[test]
    fn the_exit_status_tells_a_broken_case_from_a_low_score() {
        let low = result("default", "low", 1, &[true, false]);
        let fine = result("default", "fine", 1, &[true]);
        let summary = check::summarize(&[low.clone(), fine.clone()]);
        assert_eq!(verdict(&summary, None), 0, "low scores alone are reported");
        assert_eq!(verdict(&summary, Some(0.5)), 0);
        assert_eq!(verdict(&summary, Some(0.6)), EXIT_BELOW_BAR);
        let mut broken = fine;
        broken.completed = false;
        let summary = check::summarize(&[low, broken]);
        assert_eq!(verdict(&summary, None), EXIT_INCOMPLETE);
        assert_eq!(
            verdict(&summary, Some(0.6)),
            EXIT_INCOMPLETE,
            "1 wins over 3"
        );
    }
}
