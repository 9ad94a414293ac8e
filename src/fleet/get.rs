//! `maintd get [NODE]`: every node's drain, from the NodeDrain objects
//! the agents write, as `kubectl get` shows a resource: a table (`-o
//! wide` for more columns), or the objects (`-o json|yaml`, a `List` as
//! kubectl prints one); `-w` prints the table and then a line per change.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

use jiff::Timestamp;
use kube::api::ListParams;
use kube::core::{ObjectList, Request};
use serde_json::{Value, json};

use super::follow::{Change, Follower};
use super::{FleetError, NODEDRAINS, table};

/// What `-o` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Wide,
    Json,
    Yaml,
}

/// What `maintd get` was asked.
#[derive(Clone, Debug)]
pub struct GetOptions {
    /// One node's drain only.
    pub node: Option<String>,
    pub format: Format,
    /// Only the nodes whose labels match (NodeDrain objects carry no
    /// labels of their own: the selector is matched against the Nodes').
    pub selector: Option<String>,
    pub watch: bool,
}

/// The rights `maintd get` uses, for a refusal's message.
const NEED: &str = "list and watch on nodedrains.maintd.io";
/// Metadata only, for the Nodes a label selector matches.
const ACCEPT_METADATA_LIST: &str =
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";

/// Runs `maintd get`: the table or objects on `out`, "No resources
/// found." on `err` as kubectl says it. With `watch`, runs until the
/// caller stops it or `out` is closed.
pub async fn run(
    client: &kube::Client,
    server: &str,
    opts: &GetOptions,
    out: &mut (dyn Write + Send),
    err: &mut (dyn Write + Send),
) -> Result<(), FleetError> {
    let fields = opts.node.as_ref().map(|n| format!("metadata.name={n}"));
    let mut follower = Follower::new(
        client.clone(),
        server,
        NODEDRAINS,
        fields,
        "NodeDrains",
        NEED,
    );
    let mut printer = Printer::new(opts.format);
    let mut nodes = NodeFilter::new(opts.selector.clone());
    loop {
        let change = follower.next().await?;
        let written = match change {
            Change::Listed(items) => {
                nodes.refresh(client, server).await?;
                let items: Vec<Value> = items.into_iter().filter(|o| nodes.keeps(o)).collect();
                if !opts.watch {
                    return once(client, server, opts, &items, out, err).await;
                }
                printer.listed(&items, out, err)
            }
            Change::Applied(o) if nodes.keeps(&o) => printer.applied(&o, out),
            Change::Deleted(o) => printer.deleted(&o, out),
            Change::Applied(_) => Ok(()),
        };
        match written {
            Ok(()) => {}
            // The reader went away (`| head`): done.
            Err(e) if super::gone(&e) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
}

/// The answer of a `get` without `-w`.
async fn once(
    client: &kube::Client,
    server: &str,
    opts: &GetOptions,
    items: &[Value],
    out: &mut (dyn Write + Send),
    err: &mut (dyn Write + Send),
) -> Result<(), FleetError> {
    let result = match (&opts.node, items) {
        (Some(node), []) => return Err(not_found(client, server, node).await),
        (Some(_), [one, ..]) => write_objects(opts.format, std::slice::from_ref(one), false, out),
        (None, _) => write_objects(opts.format, items, true, out),
    };
    let result = result.and_then(|()| {
        if items.is_empty() && matches!(opts.format, Format::Table | Format::Wide) {
            writeln!(err, "No resources found.")?;
        }
        out.flush()
    });
    match result {
        Err(e) if !super::gone(&e) => Err(e.into()),
        _ => Ok(()),
    }
}

/// Writes the objects: a table, or one object / a List as JSON or YAML.
fn write_objects(
    format: Format,
    items: &[Value],
    as_list: bool,
    out: &mut (dyn Write + Send),
) -> std::io::Result<()> {
    match format {
        Format::Table | Format::Wide if items.is_empty() => Ok(()),
        Format::Table | Format::Wide => {
            let (text, _) = table::render(items, Timestamp::now(), format == Format::Wide);
            out.write_all(text.as_bytes())
        }
        Format::Json | Format::Yaml => {
            let doc = if as_list {
                let mut sorted = items.to_vec();
                sorted.sort_by(|a, b| name(a).cmp(name(b)));
                list(sorted)
            } else {
                items.first().cloned().unwrap_or(Value::Null)
            };
            write_doc(format, &doc, out)
        }
    }
}

/// Objects as kubectl prints several: a `v1` `List`.
pub fn list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}})
}

fn write_doc(format: Format, doc: &Value, out: &mut (dyn Write + Send)) -> std::io::Result<()> {
    let text = match format {
        Format::Yaml => serde_saphyr::to_string(doc).map_err(std::io::Error::other)?,
        _ => {
            let mut t = serde_json::to_string_pretty(doc).map_err(std::io::Error::other)?;
            t.push('\n');
            t
        }
    };
    out.write_all(text.as_bytes())
}

fn name(o: &Value) -> &str {
    o["metadata"]["name"].as_str().unwrap_or("")
}

/// No NodeDrain for `node`: whether the Node exists says what is wrong.
async fn not_found(client: &kube::Client, server: &str, node: &str) -> FleetError {
    let hint = match crate::preflight::node_exists(client, server, node).await {
        Ok(()) => format!(
            "node {node} exists but its agent has not reported: is maintd running on {node} (its DaemonSet's pod there)?"
        ),
        Err(crate::preflight::PreflightError::NoNode { .. }) => {
            format!("there is no node {node} either (`kubectl get nodes` lists them)")
        }
        Err(_) => "could not tell whether the node exists".to_string(),
    };
    FleetError::Refused(format!("nodedrain {node:?} not found: {hint}"))
}

/// `-l`: the names of the Nodes whose labels match, read again each time
/// the NodeDrains are listed (the first time, and after a 410).
struct NodeFilter {
    selector: Option<String>,
    names: BTreeSet<String>,
}

impl NodeFilter {
    fn new(selector: Option<String>) -> NodeFilter {
        NodeFilter {
            selector,
            names: BTreeSet::new(),
        }
    }

    fn keeps(&self, o: &Value) -> bool {
        self.selector.is_none() || self.names.contains(name(o))
    }

    async fn refresh(&mut self, client: &kube::Client, server: &str) -> Result<(), FleetError> {
        let Some(selector) = &self.selector else {
            return Ok(());
        };
        let what = format!("listing the nodes labelled {selector}");
        let api_err = |e: kube::Error| match super::api_code(&e) {
            Some(400) => FleetError::Usage(format!(
                "-l {selector:?} is not a label selector the API server takes: {}",
                crate::preflight::describe(&e, server)
            )),
            _ => FleetError::from_api(&what, "list on nodes (for -l)", server, &e),
        };
        let mut lp = ListParams::default().labels(selector).limit(500);
        let mut names = BTreeSet::new();
        loop {
            let mut req = Request::new("/api/v1/nodes")
                .list(&lp)
                .map_err(|e| api_err(kube::Error::BuildRequest(e)))?;
            req.headers_mut().insert(
                http::header::ACCEPT,
                http::HeaderValue::from_static(ACCEPT_METADATA_LIST),
            );
            let page: ObjectList<Value> = client.request(req).await.map_err(api_err)?;
            names.extend(page.items.iter().map(|n| name(n).to_string()));
            match page.metadata.continue_ {
                Some(c) if !c.is_empty() => lp.continue_token = Some(c),
                _ => break,
            }
        }
        self.names = names;
        Ok(())
    }
}

/// Prints a watch: the table first, then a line for each change.
struct Printer {
    format: Format,
    /// What was last printed of each node, to print only what changed
    /// (for a table: the row without its age).
    shown: BTreeMap<String, Value>,
    /// The table's column widths, once its header is printed.
    widths: Option<Vec<usize>>,
    /// Whether the first list has been printed.
    started: bool,
}

impl Printer {
    fn new(format: Format) -> Printer {
        Printer {
            format,
            shown: BTreeMap::new(),
            widths: None,
            started: false,
        }
    }

    fn wide(&self) -> bool {
        self.format == Format::Wide
    }

    /// A (re)list: the first prints the table; a later one (after the
    /// watch's history ran out) prints what changed meanwhile.
    fn listed(
        &mut self,
        items: &[Value],
        out: &mut (dyn Write + Send),
        err: &mut (dyn Write + Send),
    ) -> std::io::Result<()> {
        let first = !self.started;
        self.started = true;
        if first && matches!(self.format, Format::Table | Format::Wide) && !items.is_empty() {
            let now = Timestamp::now();
            let (text, widths) = table::render(items, now, self.wide());
            out.write_all(text.as_bytes())?;
            for o in items {
                self.shown.insert(name(o).to_string(), self.key(o, now));
            }
            self.widths = Some(widths);
            return out.flush();
        }
        if first && items.is_empty() {
            writeln!(err, "No resources found.")?;
        }
        let mut sorted: Vec<&Value> = items.iter().collect();
        sorted.sort_by(|a, b| name(a).cmp(name(b)));
        let now_there: BTreeSet<&str> = sorted.iter().map(|o| name(o)).collect();
        let gone: Vec<String> = self
            .shown
            .keys()
            .filter(|n| !now_there.contains(n.as_str()))
            .cloned()
            .collect();
        for o in sorted {
            self.applied(o, out)?;
        }
        for n in gone {
            let last = json!({"metadata": {"name": n}});
            self.deleted(&last, out)?;
        }
        out.flush()
    }

    /// What is compared to tell a change worth a line.
    fn key(&self, o: &Value, now: Timestamp) -> Value {
        match self.format {
            Format::Table | Format::Wide => {
                let mut cells = table::cells(o, now, self.wide());
                // The age moves by itself.
                cells.remove(table::HEADERS.len() - 1);
                json!(cells)
            }
            Format::Json | Format::Yaml => {
                let mut o = o.clone();
                if let Some(m) = o["metadata"].as_object_mut() {
                    m.remove("resourceVersion");
                }
                o
            }
        }
    }

    fn applied(&mut self, o: &Value, out: &mut (dyn Write + Send)) -> std::io::Result<()> {
        let now = Timestamp::now();
        let key = self.key(o, now);
        if self.shown.get(name(o)) == Some(&key) {
            return Ok(());
        }
        self.shown.insert(name(o).to_string(), key);
        match self.format {
            Format::Table | Format::Wide => {
                let cells = table::cells(o, now, self.wide());
                self.row(cells, out)
            }
            Format::Json | Format::Yaml => self.doc(o, out),
        }
    }

    fn deleted(&mut self, o: &Value, out: &mut (dyn Write + Send)) -> std::io::Result<()> {
        if self.shown.remove(name(o)).is_none() {
            return Ok(());
        }
        match self.format {
            Format::Table | Format::Wide => {
                let mut cells = table::cells(o, Timestamp::now(), self.wide());
                cells[1] = "Deleted".to_string();
                self.row(cells, out)
            }
            Format::Json | Format::Yaml => self.doc(o, out),
        }
    }

    fn row(&mut self, cells: Vec<String>, out: &mut (dyn Write + Send)) -> std::io::Result<()> {
        if self.widths.is_none() {
            let headers = table::headers(self.wide());
            let widths = table::widths(&headers, std::slice::from_ref(&cells));
            writeln!(out, "{}", table::line(&headers, &widths))?;
            self.widths = Some(widths);
        }
        let widths = self.widths.as_deref().unwrap_or_default();
        writeln!(out, "{}", table::line(&cells, widths))?;
        out.flush()
    }

    fn doc(&mut self, o: &Value, out: &mut (dyn Write + Send)) -> std::io::Result<()> {
        if self.format == Format::Yaml {
            out.write_all(b"---\n")?;
        }
        write_doc(self.format, o, out)?;
        out.flush()
    }
}
