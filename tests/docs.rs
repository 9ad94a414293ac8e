//! The documentation, held to the code: the flag reference (docs/flags.md)
//! and the NodeMaintenance field reference (docs/nodemaintenance.md) are
//! what `maintd docs` renders from clap's definitions and the CRD's schema;
//! every relative link of README.md and docs/ leads somewhere; the pages
//! stay short enough to read; the README's test command is CI's.
//!
//! `MAINTD_BLESS_DOCS=1` rewrites the generated parts instead of failing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const BLESS: &str = "MAINTD_BLESS_DOCS";
const REGENERATE: &str = "MAINTD_BLESS_DOCS=1 cargo nextest run -E 'test(/^docs::/)'";
const END: &str = "<!-- END GENERATED -->";

/// Pages allowed to be longer than [`MAX_PAGE_LINES`] for now: none.
/// docs/scaling.md was, while its owner split it (into scaling.md,
/// scaling-simulator.md and scaling-rollout.md); a page that must grow
/// past the bound while it is split is named here, with why.
const LONG_PAGES: &[&str] = &[];
const MAX_README_LINES: usize = 300;
const MAX_PAGE_LINES: usize = 400;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// What `maintd <args>` prints; the test fails if it fails.
fn maintd(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_maintd"))
        .args(args)
        .output()
        .expect("maintd runs");
    assert!(
        out.status.success(),
        "maintd {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("maintd prints UTF-8")
}

/// README.md and every page of docs/, in name order.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("docs/ lists").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The part of `page` between its markers for `maintd docs <what>` is
/// `generated`: the test fails otherwise, or rewrites it when
/// MAINTD_BLESS_DOCS=1.
fn in_step(page: &str, what: &str, generated: &str) {
    let path = root().join(page);
    let text = read(&path);
    let begin = format!("<!-- BEGIN GENERATED: maintd docs {what}");
    let start = text
        .find(&begin)
        .and_then(|i| text[i..].find('\n').map(|n| i + n + 1))
        .unwrap_or_else(|| panic!("{page} has no line starting {begin:?}"));
    let end = text[start..]
        .find(END)
        .map(|e| start + e)
        .unwrap_or_else(|| panic!("{page} has no {END:?} after its BEGIN line"));
    let current = &text[start..end];
    if current == generated {
        return;
    }
    if std::env::var(BLESS).as_deref() == Ok("1") {
        let rewritten = format!("{}{generated}{}", &text[..start], &text[end..]);
        std::fs::write(&path, rewritten)
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        return;
    }
    let first = current
        .lines()
        .zip(generated.lines())
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| current.lines().count().min(generated.lines().count()));
    panic!(
        "{page} is out of step with the code (`maintd docs {what}`): from its generated line {} on,\n  the page has: {:?}\n  the code says: {:?}\nRegenerate it with:\n  {REGENERATE}",
        first + 1,
        current.lines().nth(first).unwrap_or("(nothing)"),
        generated.lines().nth(first).unwrap_or("(nothing)"),
    );
}

#[test]
fn the_flag_reference_is_in_step_with_the_command_line() {
    in_step("docs/flags.md", "flags", &maintd(&["docs", "flags"]));
}

#[test]
fn the_nodemaintenance_field_reference_is_in_step_with_the_crd() {
    in_step(
        "docs/nodemaintenance.md",
        "nodemaintenance",
        &maintd(&["docs", "nodemaintenance"]),
    );
}

/// The subcommands `maintd <path> --help` lists, read from clap's own help
/// text rather than from the generator.
fn help_commands(path: &[&str]) -> Vec<String> {
    let mut args = path.to_vec();
    args.push("--help");
    let help = maintd(&args);
    let Some(list) = help.split("\nCommands:\n").nth(1) else {
        return Vec::new();
    };
    // A command's name starts two spaces in; deeper lines continue its text.
    list.lines()
        .take_while(|l| l.starts_with("  "))
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// The long flags `maintd <path> --help` lists.
fn help_flags(path: &[&str]) -> Vec<String> {
    let mut args = path.to_vec();
    args.push("--help");
    let help = maintd(&args);
    let flag = regex::Regex::new(r"(?m)^\s+(?:-\w, )?--([a-z0-9-]+)").expect("a regex");
    flag.captures_iter(&help)
        .map(|c| c[1].to_string())
        .filter(|f| f != "help" && f != "version")
        .collect()
}

/// Checked against `--help` itself, so that a generator that skipped a
/// command or a flag would not pass by agreeing with itself.
#[test]
fn the_flag_reference_has_every_command_and_flag_help_lists() {
    let page = read(&root().join("docs/flags.md"));
    let sections: BTreeMap<&str, &str> = page
        .split("\n## ")
        .skip(1)
        .filter_map(|s| s.split_once('\n'))
        .collect();
    let mut todo: Vec<Vec<String>> = vec![Vec::new()];
    let mut seen = 0;
    while let Some(path) = todo.pop() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let title = ["maintd"]
            .iter()
            .chain(args.iter())
            .copied()
            .collect::<Vec<_>>()
            .join(" ");
        let section = sections
            .get(title.as_str())
            .unwrap_or_else(|| panic!("docs/flags.md has no section `## {title}`"));
        for flag in help_flags(&args) {
            let global = sections["maintd"].contains(&format!("`--{flag}"));
            assert!(
                section.contains(&format!("--{flag}`"))
                    || section.contains(&format!("--{flag} "))
                    || global,
                "docs/flags.md's `## {title}` does not list --{flag}, which `{title} --help` does"
            );
        }
        for sub in help_commands(&args) {
            let mut next = path.clone();
            next.push(sub);
            todo.push(next);
        }
        seen += 1;
    }
    assert!(seen > 5, "only {seen} commands found in `maintd --help`");
}

/// GitHub's anchor for a heading: the text as shown, lower-cased, without
/// punctuation but `-` and `_`, spaces made `-`.
fn slug(heading: &str) -> String {
    let link = regex::Regex::new(r"\[([^\]]*)\]\([^)]*\)").expect("a regex");
    let shown = link.replace_all(heading, "$1");
    shown
        .chars()
        .filter(|c| !matches!(c, '`' | '*'))
        .flat_map(char::to_lowercase)
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// `text` without fenced code blocks and inline code spans.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            out.push('\n');
            continue;
        }
        if fenced {
            out.push('\n');
            continue;
        }
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                out.push(c);
            }
        }
        out.push('\n');
    }
    out
}

/// The anchors of a Markdown page: its headings' (with GitHub's `-1`,
/// `-2` for repeats) and HTML `id`/`name` attributes.
fn anchors(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let title = line[hashes..].trim().trim_end_matches('#').trim();
            let base = slug(title);
            let n = count.entry(base.clone()).or_insert(0);
            found.push(if *n == 0 {
                base.clone()
            } else {
                format!("{base}-{n}")
            });
            *n += 1;
        }
    }
    let html = regex::Regex::new(r#"<a\s+(?:id|name)="([^"]+)""#).expect("a regex");
    found.extend(html.captures_iter(text).map(|c| c[1].to_string()));
    found
}

/// Every relative link of `page`'s text, with the line it is on.
fn links(page: &str) -> Vec<(usize, String)> {
    let inline =
        regex::Regex::new(r#"\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)"#).expect("a regex");
    let reference = regex::Regex::new(r"^\s*\[[^\]]+\]:\s*(\S+)").expect("a regex");
    let mut out = Vec::new();
    for (n, line) in prose(page).lines().enumerate() {
        let targets = inline
            .captures_iter(line)
            .chain(reference.captures_iter(line))
            .map(|c| c[1].to_string());
        for t in targets {
            let external = t.contains("://") || t.starts_with("mailto:");
            if !external {
                out.push((n + 1, t));
            }
        }
    }
    out
}

#[test]
fn every_relative_link_leads_to_a_file_and_heading_that_exist() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = read(&page);
        let dir = page.parent().expect("a page is in a directory");
        let name = page
            .strip_prefix(root())
            .unwrap_or(&page)
            .display()
            .to_string();
        for (line, target) in links(&text) {
            checked += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                page.clone()
            } else {
                dir.join(path)
            };
            if !file.exists() {
                broken.push(format!(
                    "{name}:{line}: {target}: no file {}",
                    file.display()
                ));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if file.extension().is_none_or(|e| e != "md") {
                continue;
            }
            let known = anchors(&read(&file));
            if !known.iter().any(|a| a == anchor) {
                broken.push(format!(
                    "{name}:{line}: {target}: {} has no heading with the anchor #{anchor}",
                    file.strip_prefix(root()).unwrap_or(&file).display()
                ));
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the link pattern right?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_and_each_page_fit_on_a_page() {
    let mut long = Vec::new();
    for page in pages() {
        let name = page
            .file_name()
            .expect("a file")
            .to_string_lossy()
            .into_owned();
        let lines = read(&page).lines().count();
        let (max, exempt) = if page == root().join("README.md") {
            (MAX_README_LINES, false)
        } else {
            (MAX_PAGE_LINES, LONG_PAGES.contains(&name.as_str()))
        };
        if lines >= max && !exempt {
            long.push(format!("{name}: {lines} lines (fewer than {max} wanted)"));
        }
    }
    assert!(
        long.is_empty(),
        "pages too long; split them:\n{}",
        long.join("\n")
    );
}

/// The README's "Try it" gives the test command; CI must run the same.
#[test]
fn the_readme_gives_the_test_command_ci_runs() {
    let readme = read(&root().join("README.md"));
    let try_it = readme
        .split("\n## ")
        .find(|s| s.starts_with("Try it"))
        .expect("the README has a `## Try it` section");
    let command = try_it
        .split("```")
        .skip(1)
        .step_by(2)
        .flat_map(str::lines)
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .find(|l| l.starts_with("scripts/"))
        .expect("the README's Try it block gives a scripts/ test command");
    assert_eq!(command, "scripts/test", "the README's test command");
    let ci = read(&root().join(".ci/run"));
    assert!(
        ci.lines()
            .map(str::trim)
            .any(|l| l == command || l.starts_with(&format!("{command} "))),
        ".ci/run does not run the README's test command {command:?}"
    );
}

/// The body of the first `cat > my-maintd/kustomization.yaml` here-doc
/// of `text`.
fn overlay(text: &str) -> String {
    let start = text
        .find("cat > my-maintd/kustomization.yaml <<'")
        .expect("an overlay written with cat");
    let rest = &text[start..];
    let marker_start = rest.find("<<'").expect("a here-doc") + 3;
    let marker = &rest
        [marker_start..marker_start + rest[marker_start..].find('\'').expect("a quoted marker")];
    let body_start = rest.find('\n').expect("a body") + 1;
    let body_end = rest[body_start..]
        .find(&format!("\n{marker}\n"))
        .expect("the here-doc ends");
    rest[body_start..body_start + body_end].to_string()
}

/// The README's short install writes the same overlay as docs/install.md,
/// whose steps tests/install.rs runs against a cluster.
#[test]
fn the_readme_overlay_is_the_one_the_install_test_runs() {
    let readme = read(&root().join("README.md"));
    let install = read(&root().join("docs/install.md"));
    assert_eq!(overlay(&readme), overlay(&install));
}

#[test]
fn slugs_follow_githubs_rules() {
    assert_eq!(slug("Reboots and shutdowns"), "reboots-and-shutdowns");
    assert_eq!(
        slug("Why `99-zz-maintd.conf` sorts after the kubelet's `99-kubelet.conf`"),
        "why-99-zz-maintdconf-sorts-after-the-kubelets-99-kubeletconf"
    );
    assert_eq!(
        slug("apt / dnf unattended upgrades"),
        "apt--dnf-unattended-upgrades"
    );
    assert_eq!(slug("A [link](x.md) in it"), "a-link-in-it");
    assert_eq!(
        anchors("# A\n## A\n```\n# not a heading\n```\n### B_c"),
        ["a", "a-1", "b_c"]
    );
}
