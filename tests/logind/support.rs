//! Helpers shared by the logind tests: event waits, python-dbusmock.

use std::future::Future;
use std::process::Stdio;
use std::time::Duration;

use maintd::inhibitor::{InhibitorConfig, ShutdownEvent};
use maintd::logind::{BusAddress, Inhibitor, Logind};
use maintd_sim::dbus::PrivateBus;
use tokio::sync::mpsc;
use zbus::zvariant::Value;

/// Only there so a broken build cannot hang CI; no test measures time.
pub const PATIENCE: Duration = Duration::from_secs(30);

pub fn config(bus: &PrivateBus) -> InhibitorConfig {
    let mut c = InhibitorConfig::new("node-a");
    c.bus = BusAddress::Address(bus.address.clone());
    c.reconnect_initial = Duration::from_millis(50);
    c.reconnect_max = Duration::from_millis(400);
    c
}

pub async fn next_event(rx: &mut mpsc::Receiver<ShutdownEvent>) -> ShutdownEvent {
    match tokio::time::timeout(PATIENCE, rx.recv()).await {
        Ok(Some(e)) => e,
        Ok(None) => panic!("inhibitor event channel closed"),
        Err(_) => panic!("no inhibitor event within {PATIENCE:?}"),
    }
}

/// Skips events until one matches.
pub async fn event_matching(
    rx: &mut mpsc::Receiver<ShutdownEvent>,
    pred: impl Fn(&ShutdownEvent) -> bool,
) -> ShutdownEvent {
    loop {
        let e = next_event(rx).await;
        if pred(&e) {
            return e;
        }
    }
}

/// Waits until `check` holds, re-evaluating it as the peer catches up.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let polled = async {
        while !check().await {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    if tokio::time::timeout(PATIENCE, polled).await.is_err() {
        panic!("gave up waiting: {what}");
    }
}

pub fn ours(list: &[Inhibitor], token: &str) -> usize {
    list.iter().filter(|i| i.why.contains(token)).count()
}

pub async fn count_ours(logind: &Logind, token: &str) -> usize {
    ours(
        &logind.list_inhibitors().await.expect("ListInhibitors"),
        token,
    )
}

pub async fn client(bus: &PrivateBus) -> Logind {
    Logind::connect(&BusAddress::Address(bus.address.clone()))
        .await
        .expect("connect to the private bus")
}

/// python-dbusmock serving `org.freedesktop.login1` on a private bus.
pub struct DbusMock {
    child: tokio::process::Child,
    conn: zbus::Connection,
}

impl DbusMock {
    /// `template`: use dbusmock's logind template; otherwise an empty mock
    /// object that the test fills with `AddMethod`.
    pub async fn start(bus: &PrivateBus, template: bool) -> DbusMock {
        // The distribution's python has python3-dbusmock; a pyenv one on PATH does not.
        let mut cmd = tokio::process::Command::new("/usr/bin/python3");
        cmd.args(["-m", "dbusmock"]);
        if template {
            cmd.args(["--template", "logind"]);
        } else {
            cmd.args([
                "--system",
                "org.freedesktop.login1",
                "/org/freedesktop/login1",
                "org.freedesktop.login1.Manager",
            ]);
        }
        let child = cmd
            .env("DBUS_SYSTEM_BUS_ADDRESS", &bus.address)
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("run /usr/bin/python3 -m dbusmock (apt-get install python3-dbusmock)");
        let conn = zbus::connection::Builder::address(bus.address.as_str())
            .unwrap()
            .build()
            .await
            .unwrap();
        let dbus = zbus::fdo::DBusProxy::new(&conn).await.unwrap();
        eventually("dbusmock owns org.freedesktop.login1", || {
            let dbus = dbus.clone();
            async move {
                let name = zbus::names::BusName::try_from("org.freedesktop.login1").unwrap();
                dbus.name_has_owner(name).await.unwrap_or(false)
            }
        })
        .await;
        DbusMock { child, conn }
    }

    async fn mock_call<B>(&self, method: &str, body: &B)
    where
        B: serde::Serialize + zbus::zvariant::DynamicType,
    {
        self.conn
            .call_method(
                Some("org.freedesktop.login1"),
                "/org/freedesktop/login1",
                Some("org.freedesktop.DBus.Mock"),
                method,
                body,
            )
            .await
            .unwrap_or_else(|e| panic!("dbusmock {method}: {e}"));
    }

    /// How many times `method` of the logind interface was called.
    pub async fn calls(&self, method: &str) -> usize {
        let reply = self
            .conn
            .call_method(
                Some("org.freedesktop.login1"),
                "/org/freedesktop/login1",
                Some("org.freedesktop.DBus.Mock"),
                "GetMethodCalls",
                &(method,),
            )
            .await
            .unwrap_or_else(|e| panic!("dbusmock GetMethodCalls: {e}"));
        let calls: Vec<(u64, Vec<zbus::zvariant::OwnedValue>)> =
            reply.body().deserialize().expect("GetMethodCalls reply");
        calls.len()
    }

    pub async fn add_property(&self, name: &str, value: Value<'_>) {
        self.mock_call(
            "AddProperty",
            &("org.freedesktop.login1.Manager", name, value),
        )
        .await;
    }

    pub async fn add_method(&self, name: &str, in_sig: &str, out_sig: &str, code: &str) {
        self.mock_call(
            "AddMethod",
            &(
                "org.freedesktop.login1.Manager",
                name,
                in_sig,
                out_sig,
                code,
            ),
        )
        .await;
    }

    pub async fn emit_prepare_for_shutdown(&self, start: bool) {
        self.emit_prepare_for_shutdown_raw("b", Value::Bool(start))
            .await;
    }

    /// Emits PrepareForShutdown with any signature, to send malformed ones.
    pub async fn emit_prepare_for_shutdown_raw(&self, signature: &str, arg: Value<'_>) {
        let args: Vec<Value<'_>> = vec![arg];
        self.mock_call(
            "EmitSignal",
            &(
                "org.freedesktop.login1.Manager",
                "PrepareForShutdown",
                signature,
                args,
            ),
        )
        .await;
    }

    /// Emits PrepareForSleep (true: a suspend is coming; false: resumed).
    pub async fn emit_prepare_for_sleep(&self, start: bool) {
        let args: Vec<Value<'_>> = vec![Value::Bool(start)];
        self.mock_call(
            "EmitSignal",
            &(
                "org.freedesktop.login1.Manager",
                "PrepareForSleep",
                "b",
                args,
            ),
        )
        .await;
    }

    /// Kills the mock: logind "crashes" and takes its inhibitor table along.
    pub async fn kill(mut self) {
        let _ = self.child.kill().await;
    }
}
