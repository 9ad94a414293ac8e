//! Records the git revision the binary is built from, for `maintd --version`
//! and the image labels: `MAINTD_GIT_REVISION` at build time wins (a
//! container build has no .git), else `git rev-parse`, else "unknown". And
//! places an idle agent's functions together when asked (see
//! `idle_functions_first`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-env-changed=MAINTD_GIT_REVISION");
    println!("cargo:rerun-if-changed=build.rs");
    let from_env = std::env::var("MAINTD_GIT_REVISION")
        .ok()
        .filter(|r| !r.trim().is_empty());
    let revision = match from_env {
        Some(r) => r.trim().to_string(),
        None => {
            watch_head();
            git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into())
        }
    };
    println!("cargo:rustc-env=MAINTD_GIT_REVISION={revision}");
    idle_functions_first();
}

/// With `MAINTD_IDLE_FUNCTIONS` (a file of function names, one a line:
/// scripts/idle-functions.txt, which scripts/build-image gives), the
/// linker places those functions first, together: an idle agent then runs
/// code from a few pages instead of pages all over its binary (see
/// src/memory.rs). Needs lld, the linker Rust uses on x86_64 Linux; names
/// it does not find are passed over.
fn idle_functions_first() {
    println!("cargo:rerun-if-env-changed=MAINTD_IDLE_FUNCTIONS");
    let Some(file) = std::env::var_os("MAINTD_IDLE_FUNCTIONS").filter(|f| !f.is_empty()) else {
        return;
    };
    let file = PathBuf::from(file);
    let file = std::fs::canonicalize(&file).unwrap_or(file);
    println!("cargo:rerun-if-changed={}", file.display());
    println!(
        "cargo:rustc-link-arg-bin=maintd=-Wl,--symbol-ordering-file={}",
        file.display()
    );
    println!("cargo:rustc-link-arg-bin=maintd=-Wl,--no-warn-symbol-ordering");
}

/// Rebuilds when HEAD moves: a commit, a checkout, a fetch that packs refs.
/// In a worktree HEAD lives in the worktree's git dir and the branch refs in
/// the common one, so both are watched.
fn watch_head() {
    let (Some(git_dir), Some(common)) = (
        git(&["rev-parse", "--git-dir"]),
        git(&["rev-parse", "--git-common-dir"]),
    ) else {
        return;
    };
    let (git_dir, common) = (PathBuf::from(git_dir), PathBuf::from(common));
    let watch = |p: &Path| {
        if p.exists() {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    };
    watch(&git_dir.join("HEAD"));
    watch(&common.join("packed-refs"));
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch(&common.join(branch));
    }
}
