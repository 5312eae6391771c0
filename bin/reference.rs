//! The command line as a reference, with no database: `sluice completions
//! <shell>` prints a completion script, `sluice man [subcommand]` a manual
//! page (roff, for `man -l -`).

use clap::{Args, CommandFactory};

use crate::Cli;
use crate::failure::Failure;

/// `sluice completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    shell: clap_complete::Shell,
}

/// `sluice man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// A subcommand (`enqueue`, `enqueue delete-aged-rows`, `run` …);
    /// without one, the page of `sluice` itself.
    subcommand: Vec<String>,
}

/// Prints the completion script for `args.shell` on stdout.
pub fn completions(args: &CompletionsArgs) -> Result<(), Failure> {
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "sluice", &mut script);
    print_all(&script)
}

/// Prints the manual page of `sluice` or of the subcommand named.
pub fn man(args: &ManArgs) -> Result<(), Failure> {
    let mut command = Cli::command();
    command.build();
    let (mut page, mut invoked) = ("sluice".to_owned(), "sluice".to_owned());
    for word in &args.subcommand {
        let Some(sub) = command.find_subcommand(word).cloned() else {
            return Err(Failure::BadInput(format!(
                "no subcommand `{word}` of `{invoked}` (see `{invoked} --help`)"
            )));
        };
        page = format!("{page}-{word}");
        invoked = format!("{invoked} {word}");
        command = sub.display_name(page.clone()).bin_name(invoked.clone());
    }
    let mut roff = Vec::new();
    clap_mangen::Man::new(command)
        .render(&mut roff)
        .map_err(|e| Failure::Runtime(e.into()))?;
    print_all(&roff)
}

/// Writes `bytes` to stdout; a reader that went away (`| head`) is no
/// failure.
fn print_all(bytes: &[u8]) -> Result<(), Failure> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(bytes) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Failure::Runtime(e.into())),
        _ => Ok(()),
    }
}
