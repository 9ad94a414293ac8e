//! The reference pages of docs/ that are generated, not written: every
//! command's flags (from clap's own definitions) and the NodeMaintenance
//! fields (from the CRD's OpenAPI schema). `maintd docs flags` and `maintd
//! docs nodemaintenance` print them; a test keeps docs/ in step.
//!
//! Both are plain text functions of their input, sorted, with no time in
//! them, so the same build always prints the same page.

use serde_json::Value;

/// The pages this module renders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Page {
    /// Every command's flags, for docs/flags.md.
    Flags,
    /// The NodeMaintenance fields, for docs/nodemaintenance.md.
    Nodemaintenance,
}

/// Why a page could not be rendered (a bug in the definitions, not input).
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    #[error("the NodeMaintenance CRD cannot be rendered: {0}")]
    Crd(#[from] crate::api::CrdError),
    #[error("the NodeMaintenance CRD does not convert to JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// The page `page`, for the command line `cmd` (the whole `maintd`).
pub fn render(page: Page, cmd: &clap::Command) -> Result<String, ReferenceError> {
    match page {
        Page::Flags => Ok(flags(cmd)),
        Page::Nodemaintenance => {
            let crd = serde_json::to_value(crate::api::crd()?)?;
            Ok(crd_fields(&crd))
        }
    }
}

/// Every visible command's flags: the program's own (global) ones first,
/// then one section per subcommand, in name order, nested ones after their
/// parent.
pub fn flags(cmd: &clap::Command) -> String {
    let mut cmd = cmd.clone();
    // Building fills in what the derive leaves to clap (how many values a
    // flag takes, the defaults of switches) and copies global flags down.
    cmd.build();
    let mut out = String::new();
    let name = cmd.get_name().to_string();
    out.push_str(&format!("## {name}\n\n"));
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        out.push_str(&format!("{}\n\n", one_paragraph(&about.to_string())));
    }
    out.push_str("Flags every command takes:\n\n");
    out.push_str(&args_table(cmd.get_arguments().collect()));
    for sub in sorted_subcommands(&cmd) {
        section(&mut out, &name, sub);
    }
    out
}

fn sorted_subcommands(cmd: &clap::Command) -> Vec<&clap::Command> {
    let mut subs: Vec<&clap::Command> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .collect();
    subs.sort_by_key(|s| s.get_name());
    subs
}

fn section(out: &mut String, parent: &str, cmd: &clap::Command) {
    let name = format!("{parent} {}", cmd.get_name());
    out.push_str(&format!("\n## {name}\n\n"));
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        out.push_str(&format!("{}\n\n", one_paragraph(&about.to_string())));
    }
    let aliases: Vec<&str> = cmd.get_visible_aliases().collect();
    if !aliases.is_empty() {
        let aliases: Vec<String> = aliases.iter().map(|a| format!("`{parent} {a}`")).collect();
        out.push_str(&format!("Also: {}.\n\n", aliases.join(", ")));
    }
    let args: Vec<&clap::Arg> = cmd.get_arguments().filter(|a| !a.is_global_set()).collect();
    if args.iter().any(|a| shown(a)) {
        out.push_str(&args_table(args));
    } else {
        out.push_str("No flags of its own.\n");
    }
    for sub in sorted_subcommands(cmd) {
        section(out, &name, sub);
    }
}

/// Whether an argument belongs in the reference (`--help` and `--version`
/// are everywhere; hidden ones are not for people).
fn shown(a: &clap::Arg) -> bool {
    !a.is_hide_set() && !matches!(a.get_id().as_str(), "help" | "version")
}

/// A table of arguments: positional ones first as they come, then flags
/// by name.
fn args_table(args: Vec<&clap::Arg>) -> String {
    let mut args: Vec<&clap::Arg> = args.into_iter().filter(|a| shown(a)).collect();
    args.sort_by_key(|a| (!a.is_positional(), a.get_long().map(str::to_string)));
    let mut out =
        String::from("| flag | environment | default | what it does |\n|---|---|---|---|\n");
    for a in args {
        let env = a
            .get_env()
            .map(|e| format!("`{}`", e.to_string_lossy()))
            .unwrap_or_default();
        let defaults: Vec<String> = a
            .get_default_values()
            .iter()
            .map(|d| d.to_string_lossy().into_owned())
            .collect();
        let default = if defaults.is_empty() {
            String::new()
        } else if defaults.iter().all(String::is_empty) {
            "(empty)".to_string()
        } else {
            format!("`{}`", defaults.join(","))
        };
        let mut what = a
            .get_long_help()
            .or(a.get_help())
            .map(|h| one_paragraph(&h.to_string()))
            .unwrap_or_default();
        let values: Vec<String> = a
            .get_possible_values()
            .iter()
            .filter(|v| !v.is_hide_set())
            .map(|v| match v.get_help() {
                Some(h) => format!("`{}`: {}", v.get_name(), one_paragraph(&h.to_string())),
                None => format!("`{}`", v.get_name()),
            })
            .collect();
        if !values.is_empty() {
            push_sentence(&mut what, &format!("One of: {}.", values.join("; ")));
        }
        if a.is_required_set() {
            push_sentence(&mut what, "Required.");
        }
        if matches!(a.get_action(), clap::ArgAction::Append) && !what.contains("more than once") {
            push_sentence(&mut what, "May be given more than once.");
        }
        if let Some(d) = a.get_value_delimiter() {
            push_sentence(
                &mut what,
                &format!("Several values may be given separated by `{d}`."),
            );
        }
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            usage(a),
            env,
            cell(&default),
            cell(&what)
        ));
    }
    out
}

/// How an argument is written: `--name <VALUE>`, `-o, --output <OUTPUT>`,
/// `--switch`, or `<NODE>` for a positional one.
fn usage(a: &clap::Arg) -> String {
    let value = a
        .get_value_names()
        .map(|names| {
            names
                .iter()
                .map(|n| format!("<{n}>"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| format!("<{}>", a.get_id().as_str().to_uppercase()));
    if a.is_positional() {
        return value;
    }
    let mut s = String::new();
    if let Some(short) = a.get_short() {
        s.push_str(&format!("-{short}, "));
    }
    if let Some(long) = a.get_long() {
        s.push_str(&format!("--{long}"));
    }
    let takes_value = a
        .get_num_args()
        .is_some_and(|n| n.takes_values() && n.max_values() > 0);
    if takes_value && a.get_action().takes_values() {
        let optional = a.get_num_args().is_some_and(|n| n.min_values() == 0);
        if optional {
            s.push_str(&format!(" [{value}]"));
        } else {
            s.push_str(&format!(" {value}"));
        }
    }
    s
}

/// The NodeMaintenance fields of every version of the CRD `crd` (JSON), one
/// row per field path in name order.
pub fn crd_fields(crd: &Value) -> String {
    let mut out = String::new();
    let kind = crd
        .pointer("/spec/names/kind")
        .and_then(Value::as_str)
        .unwrap_or("the resource");
    let group = crd
        .pointer("/spec/group")
        .and_then(Value::as_str)
        .unwrap_or("");
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for v in versions {
        let name = v.get("name").and_then(Value::as_str).unwrap_or("");
        out.push_str(&format!("### {kind} `{group}/{name}`\n\n"));
        let Some(schema) = v.pointer("/schema/openAPIV3Schema") else {
            out.push_str("No schema.\n\n");
            continue;
        };
        out.push_str("| field | type | bounds | default | what it is |\n|---|---|---|---|---|\n");
        let mut rows = Vec::new();
        walk(schema, "", &mut rows);
        for r in rows {
            out.push_str(&r);
        }
        out.push('\n');
    }
    out
}

/// Rows for the properties of `schema` (an object), under `path`.
fn walk(schema: &Value, path: &str, rows: &mut Vec<String>) {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut names: Vec<&String> = props.keys().collect();
    names.sort();
    for name in names {
        let field = &props[name];
        let here = if path.is_empty() {
            name.clone()
        } else {
            format!("{path}.{name}")
        };
        rows.push(row(&here, field, required.contains(&name.as_str())));
        // An array's items, and a map's values, are described under the
        // field's own path.
        let mut inner = field;
        let mut inner_path = here.clone();
        while inner.get("type").and_then(Value::as_str) == Some("array") {
            let Some(items) = inner.get("items") else {
                break;
            };
            inner = items;
            inner_path.push_str("[]");
        }
        if let Some(values) = inner.get("additionalProperties").filter(|v| v.is_object()) {
            inner = values;
            inner_path.push_str(".*");
        }
        walk(inner, &inner_path, rows);
    }
}

fn row(path: &str, field: &Value, required: bool) -> String {
    let mut ty = type_name(field);
    if required {
        ty.push_str(", required");
    }
    let mut bounds = Vec::new();
    let num = |k: &str| field.get(k).and_then(Value::as_f64).map(number);
    if let Some(n) = num("minimum") {
        bounds.push(format!("minimum {n}"));
    }
    if let Some(n) = num("maximum") {
        bounds.push(format!("maximum {n}"));
    }
    if let Some(n) = num("minLength") {
        bounds.push(format!("minLength {n}"));
    }
    if let Some(n) = num("maxLength") {
        bounds.push(format!("maxLength {n}"));
    }
    if let Some(n) = num("minItems") {
        bounds.push(format!("minItems {n}"));
    }
    if let Some(n) = num("maxItems") {
        bounds.push(format!("maxItems {n}"));
    }
    if let Some(p) = field.get("pattern").and_then(Value::as_str) {
        bounds.push(format!("pattern `{p}`"));
    }
    if let Some(values) = field.get("enum").and_then(Value::as_array) {
        let values: Vec<String> = values.iter().map(|v| format!("`{}`", plain(v))).collect();
        bounds.push(format!("one of {}", values.join(", ")));
    }
    if let Some(keys) = field
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
    {
        let keys: Vec<String> = keys.iter().map(|k| format!("`{}`", plain(k))).collect();
        bounds.push(format!("one entry per {}", keys.join(", ")));
    }
    if let Some(rules) = field
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        for r in rules {
            let rule = r.get("rule").and_then(Value::as_str).unwrap_or("");
            match r.get("message").and_then(Value::as_str) {
                Some(m) => bounds.push(format!("{m} (`{rule}`)")),
                None => bounds.push(format!("`{rule}`")),
            }
        }
    }
    let default = field
        .get("default")
        .map(|d| format!("`{}`", plain(d)))
        .unwrap_or_default();
    let what = field
        .get("description")
        .and_then(Value::as_str)
        .map(one_paragraph)
        .unwrap_or_default();
    format!(
        "| `{path}` | {} | {} | {} | {} |\n",
        cell(&ty),
        cell(&bounds.join("; ")),
        cell(&default),
        cell(&what)
    )
}

/// `string`, `integer (int32)`, `array of object`, `map of string`.
fn type_name(field: &Value) -> String {
    let base = field
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("any")
        .to_string();
    let base = match field.get("format").and_then(Value::as_str) {
        Some(f) => format!("{base} ({f})"),
        None => base,
    };
    if base == "array"
        && let Some(items) = field.get("items")
    {
        return format!("array of {}", type_name(items));
    }
    if base == "object"
        && let Some(values) = field.get("additionalProperties").filter(|v| v.is_object())
    {
        return format!("map of {}", type_name(values));
    }
    base
}

/// A whole number without its `.0`.
fn number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        n.to_string()
    }
}

fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Help or a description as one line: wrapped lines joined, paragraphs
/// kept apart by a space.
fn one_paragraph(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Adds a sentence after `what`, ending `what`'s own first (clap drops the
/// full stop of a one-sentence help).
fn push_sentence(what: &mut String, sentence: &str) {
    if !what.is_empty() {
        if !what.ends_with(['.', '!', '?']) {
            what.push('.');
        }
        what.push(' ');
    }
    what.push_str(sentence);
}

/// Text safe inside a Markdown table cell.
fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cli() -> clap::Command {
        clap::Command::new("tool")
            .about("A tool.")
            .arg(
                clap::Arg::new("log")
                    .long("log")
                    .global(true)
                    .env("TOOL_LOG")
                    .default_value("info")
                    .help("Log filter."),
            )
            .subcommand(
                clap::Command::new("zeta")
                    .about("Last by name.")
                    .arg(
                        clap::Arg::new("mode")
                            .long("mode")
                            .value_parser(["a", "b"])
                            .default_value("a")
                            .help("A | B."),
                    )
                    .arg(clap::Arg::new("node").required(true).help("The node.")),
            )
            .subcommand(
                clap::Command::new("alpha")
                    .about("First by name.")
                    .arg(
                        clap::Arg::new("wait")
                            .long("wait")
                            .action(clap::ArgAction::SetTrue)
                            .help("Wait."),
                    )
                    .arg(
                        clap::Arg::new("url")
                            .long("url")
                            .action(clap::ArgAction::Append)
                            .help("Where"),
                    ),
            )
            .subcommand(clap::Command::new("secret").hide(true))
    }

    #[test]
    fn flags_are_sorted_escaped_and_complete() {
        let page = flags(&cli());
        let alpha = page.find("## tool alpha").unwrap();
        let zeta = page.find("## tool zeta").unwrap();
        assert!(alpha < zeta, "{page}");
        assert!(!page.contains("secret"), "{page}");
        assert!(
            page.contains("| `--log <LOG>` | `TOOL_LOG` | `info` | Log filter. |"),
            "{page}"
        );
        // Global flags are listed once, not under every command.
        assert_eq!(page.matches("`--log <LOG>`").count(), 1, "{page}");
        assert!(page.contains("A \\| B. One of: `a`; `b`."), "{page}");
        assert!(page.contains("| `<NODE>` |"), "{page}");
        assert!(page.contains("The node. Required."), "{page}");
        assert!(page.contains("| `--wait` |"), "{page}");
        assert!(
            page.contains("Where. May be given more than once."),
            "{page}"
        );
        assert!(!page.contains("--help"), "{page}");
        assert_eq!(page, flags(&cli()));
    }

    #[test]
    fn fields_carry_types_bounds_defaults_and_nesting() {
        let crd = json!({"spec": {"group": "g.io", "names": {"kind": "K"}, "versions": [{
            "name": "v1",
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "required": ["b"], "properties": {
                    "b": {"type": "integer", "format": "int32", "minimum": 1.0, "maximum": 10.0,
                          "description": "Bee,\nwrapped | piped."},
                    "a": {"type": "string", "enum": ["X", "Y"], "default": "X"},
                    "list": {"type": "array", "maxItems": 5, "items": {"type": "object",
                        "properties": {"k": {"type": "string", "maxLength": 3}}}},
                    "m": {"type": "object", "additionalProperties": {"type": "string"}}
                }}
            }}}
        }]}});
        let page = crd_fields(&crd);
        assert!(page.starts_with("### K `g.io/v1`"), "{page}");
        let a = page.find("| `spec.a` |").unwrap();
        let b = page.find("| `spec.b` |").unwrap();
        assert!(a < b, "{page}");
        assert!(
            page.contains("| `spec.a` | string | one of `X`, `Y` | `X` |"),
            "{page}"
        );
        assert!(
            page.contains(
                "| `spec.b` | integer (int32), required | minimum 1; maximum 10 |  | Bee, wrapped \\| piped. |"
            ),
            "{page}"
        );
        assert!(
            page.contains("| `spec.list` | array of object | maxItems 5 |"),
            "{page}"
        );
        assert!(
            page.contains("| `spec.list[].k` | string | maxLength 3 |"),
            "{page}"
        );
        assert!(page.contains("| `spec.m` | map of string |"), "{page}");
    }
}
