//! Prometheus' answers to the alert gate (`/api/v1/alerts` and
//! `/api/v1/query`): any body, with the gate's filter on or off. Checks: an
//! answer that cannot be used says why; a verdict that holds drains is one
//! line of bounded length (it goes into the status, an Event and the Node
//! condition), whatever the names and messages in the answer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use maintd::fuzzing;

/// The URL as an operator gave it.
const URL: &str = "http://prometheus.monitoring:9090";
/// The longest reason a verdict may give: a few names and a quoted query.
const REASON_MAX: usize = 2048;

fn one_bounded_line(what: &str, text: &str) {
    assert!(!text.trim().is_empty(), "{what} is said in words");
    assert!(!text.contains(['\n', '\r']), "{what} is one line: {text:?}");
    assert!(
        text.chars().count() <= REASON_MAX,
        "{what} is {} characters long",
        text.chars().count()
    );
}

static FILTER: std::sync::LazyLock<regex::Regex> =
    std::sync::LazyLock::new(|| regex::Regex::new("^Watchdog$|Info").unwrap());

fuzz_target!(|data: &[u8]| {
    let filter = &*FILTER;
    let flag = data.first().copied().unwrap_or(0);
    let filter = (flag & 1 == 1).then_some(filter);
    match fuzzing::prometheus_alerts(URL, data, filter, flag & 2 == 2, flag & 4 == 4) {
        Ok(Some(reason)) => one_bounded_line("an alert verdict", &reason),
        Ok(None) => {}
        Err(why) => one_bounded_line("an unusable alerts answer", &why),
    }
    match fuzzing::prometheus_query(
        URL,
        "sum(kube_node_status_condition{condition=\"Ready\"})",
        data,
    ) {
        Ok(Some(reason)) => one_bounded_line("a query verdict", &reason),
        Ok(None) => {}
        Err(why) => one_bounded_line("an unusable query answer", &why),
    }
    let _ = fuzzing::prometheus_error(data);
});
