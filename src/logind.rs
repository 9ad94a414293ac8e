//! Client for systemd-logind's `org.freedesktop.login1.Manager`, the subset
//! maintd needs to hold a shutdown delay inhibitor.
//!
//! logind's contract for delay locks, which every caller must plan for:
//! a `delay` inhibitor only *postpones* a shutdown. logind proceeds once
//! `InhibitDelayMaxUSec` has passed since it emitted
//! `PrepareForShutdown(true)`, even while the lock's file descriptor is still
//! open. Closing the descriptor early lets the shutdown go on at once.

use std::os::fd::OwnedFd;
use std::time::Duration;

use futures::Stream;
use futures::StreamExt;
use serde::Serialize;
use zbus::proxy::CacheProperties;

/// Well-known bus name of systemd-logind.
pub const LOGIND_BUS_NAME: &str = "org.freedesktop.login1";
/// Object path of the logind manager object.
pub const LOGIND_PATH: &str = "/org/freedesktop/login1";
/// Interface of the logind manager object.
pub const LOGIND_MANAGER_INTERFACE: &str = "org.freedesktop.login1.Manager";

/// The raw zbus proxy. Prefer [`Logind`], which turns every reply into a
/// typed value or a [`LogindError`].
#[zbus::proxy(
    interface = "org.freedesktop.login1.Manager",
    default_service = "org.freedesktop.login1",
    default_path = "/org/freedesktop/login1",
    gen_blocking = false
)]
pub trait Manager {
    /// Takes an inhibitor lock; it lasts until every copy of the returned fd is closed.
    fn inhibit(
        &self,
        what: &str,
        who: &str,
        why: &str,
        mode: &str,
    ) -> zbus::Result<zbus::zvariant::OwnedFd>;

    /// Lists inhibitors as (what, who, why, mode, uid, pid).
    #[allow(clippy::type_complexity)]
    fn list_inhibitors(&self) -> zbus::Result<Vec<(String, String, String, String, u32, u32)>>;

    /// Reboots the machine (honours inhibitors). Used by tests and the demo.
    fn reboot(&self, interactive: bool) -> zbus::Result<()>;

    /// Powers the machine off (honours inhibitors). Used by tests and the demo.
    fn power_off(&self, interactive: bool) -> zbus::Result<()>;

    /// `true` when a shutdown starts waiting on delay locks, `false` if it was cancelled.
    #[zbus(signal)]
    fn prepare_for_shutdown(&self, start: bool) -> zbus::Result<()>;

    /// `true` before suspend, `false` after resume.
    #[zbus(signal)]
    fn prepare_for_sleep(&self, start: bool) -> zbus::Result<()>;

    /// The delay budget. The explicit name matters: zbus would derive
    /// `InhibitDelayMaxUsec`, which logind does not have.
    #[zbus(property(emits_changed_signal = "false"), name = "InhibitDelayMaxUSec")]
    fn inhibit_delay_max_usec(&self) -> zbus::Result<u64>;

    /// logind emits no change signal for this one: it is read on every use.
    #[zbus(property(emits_changed_signal = "false"))]
    fn preparing_for_shutdown(&self) -> zbus::Result<bool>;
}

/// Which bus to find logind on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum BusAddress {
    /// The system bus; zbus honours `DBUS_SYSTEM_BUS_ADDRESS`, otherwise
    /// `/run/dbus/system_bus_socket` (mounted from the host in a pod).
    #[default]
    System,
    /// An explicit D-Bus address, e.g. a private bus in tests and the demo.
    Address(String),
}

impl std::fmt::Display for BusAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BusAddress::System => f.write_str("the system bus"),
            BusAddress::Address(a) => write!(f, "bus {a}"),
        }
    }
}

/// Everything that can go wrong talking to logind. Nothing here panics:
/// a malformed reply becomes [`LogindError::UnexpectedReply`].
#[derive(Debug, thiserror::Error)]
pub enum LogindError {
    /// The bus could not be reached.
    #[error(
        "cannot connect to {bus}: {source}; check that the D-Bus socket is mounted and readable"
    )]
    Connect {
        /// Which bus.
        bus: String,
        /// Why.
        #[source]
        source: zbus::Error,
    },
    /// The connection broke during a call.
    #[error("D-Bus connection lost while calling logind {call}: {detail}; maintd reconnects")]
    Disconnected {
        /// The method or property being accessed.
        call: &'static str,
        /// The transport error.
        detail: String,
    },
    /// logind (or whatever owns its name) does not have the property.
    #[error(
        "logind has no property {property} ({detail}); is this systemd-logind? (InhibitDelayMaxUSec exists since systemd 183)"
    )]
    MissingProperty {
        /// The property name.
        property: &'static str,
        /// The D-Bus error text.
        detail: String,
    },
    /// The reply had a different type than logind documents.
    #[error("logind {call} replied with an unexpected type: {detail}")]
    UnexpectedReply {
        /// The method or property.
        call: &'static str,
        /// What zbus reported.
        detail: String,
    },
    /// logind refused the call (e.g. `OperationInProgress` for a delay lock
    /// while a shutdown is already under way, or access denied).
    #[error("logind refused {call}: {name}: {message}")]
    Refused {
        /// The method or property.
        call: &'static str,
        /// The D-Bus error name.
        name: String,
        /// logind's message.
        message: String,
    },
    /// Any other D-Bus failure.
    #[error("calling logind {call} failed: {source}")]
    Call {
        /// The method or property.
        call: &'static str,
        /// The zbus error.
        #[source]
        source: zbus::Error,
    },
}

impl LogindError {
    /// True when the connection itself is gone and only a reconnect helps.
    pub fn is_disconnect(&self) -> bool {
        matches!(
            self,
            LogindError::Disconnected { .. } | LogindError::Connect { .. }
        )
    }

    fn from_call(call: &'static str, err: zbus::Error) -> Self {
        match err {
            zbus::Error::InputOutput(e) => LogindError::Disconnected {
                call,
                detail: e.to_string(),
            },
            zbus::Error::Variant(e) => LogindError::UnexpectedReply {
                call,
                detail: e.to_string(),
            },
            zbus::Error::InvalidReply | zbus::Error::ExcessData | zbus::Error::MissingField => {
                LogindError::UnexpectedReply {
                    call,
                    detail: err.to_string(),
                }
            }
            zbus::Error::MethodError(name, message, _) => LogindError::Refused {
                call,
                name: name.to_string(),
                message: message.unwrap_or_default(),
            },
            zbus::Error::FDO(e) => {
                use zbus::DBusError as _;
                LogindError::Refused {
                    call,
                    name: e.name().to_string(),
                    message: e.description().unwrap_or_default().to_string(),
                }
            }
            other => LogindError::Call {
                call,
                source: other,
            },
        }
    }

    /// Property reads report a missing property with several error names
    /// (`UnknownProperty`, `InvalidArgs`, dbusmock's own); fold them into one.
    fn from_property(property: &'static str, err: zbus::Error) -> Self {
        match LogindError::from_call(property, err) {
            LogindError::Refused { name, message, .. }
                if name.ends_with("UnknownProperty")
                    || name.ends_with("InvalidArgs")
                    || message.contains("no such property") =>
            {
                LogindError::MissingProperty {
                    property,
                    detail: format!("{name}: {message}"),
                }
            }
            other => other,
        }
    }
}

/// One row of `ListInhibitors`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Inhibitor {
    /// Colon-separated operations, e.g. `shutdown:sleep`.
    pub what: String,
    /// Who holds it, e.g. `kubelet`.
    pub who: String,
    /// Why, free text; maintd puts its token here.
    pub why: String,
    /// `block` or `delay` (or `block-weak`).
    pub mode: String,
    /// uid of the holder as logind sees it (host namespace).
    pub uid: u32,
    /// pid of the holder as logind sees it (host pid, not the container's).
    pub pid: u32,
}

impl Inhibitor {
    /// True for a delay lock covering shutdown: one logind waits for.
    pub fn delays_shutdown(&self) -> bool {
        self.delays("shutdown")
    }

    /// Whether this is a delay lock on suspend.
    pub fn delays_sleep(&self) -> bool {
        self.delays("sleep")
    }

    fn delays(&self, op: &str) -> bool {
        self.mode == "delay" && self.what.split(':').any(|w| w == op)
    }
}

/// An inhibitor lock held by this process. Dropping it closes the fd,
/// which releases the lock. logind goes ahead after `InhibitDelayMaxUSec`
/// even while it is held: holding it buys at most that much time.
#[derive(Debug)]
pub struct InhibitorLock {
    _fd: OwnedFd,
}

/// A connected logind client. Properties are never cached: logind emits no
/// change signal for `PreparingForShutdown`, and a restarted logind may
/// come back with another `InhibitDelayMaxUSec`.
#[derive(Debug, Clone)]
pub struct Logind {
    proxy: ManagerProxy<'static>,
}

impl Logind {
    /// Connects to logind on `bus`.
    pub async fn connect(bus: &BusAddress) -> Result<Self, LogindError> {
        let conn = match bus {
            BusAddress::System => zbus::Connection::system().await,
            BusAddress::Address(a) => match zbus::connection::Builder::address(a.as_str()) {
                Ok(b) => b.build().await,
                Err(e) => Err(e),
            },
        }
        .map_err(|source| LogindError::Connect {
            bus: bus.to_string(),
            source,
        })?;
        Self::from_connection(&conn).await
    }

    /// Uses an existing connection.
    pub async fn from_connection(conn: &zbus::Connection) -> Result<Self, LogindError> {
        let proxy = ManagerProxy::builder(conn)
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .map_err(|e| LogindError::from_call("proxy setup", e))?;
        Ok(Logind { proxy })
    }

    /// The underlying connection (to watch for it closing).
    pub fn connection(&self) -> &zbus::Connection {
        self.proxy.inner().connection()
    }

    /// The raw proxy, for signal and owner-change streams.
    pub fn proxy(&self) -> &ManagerProxy<'static> {
        &self.proxy
    }

    /// Takes an inhibitor lock.
    pub async fn inhibit(
        &self,
        what: &str,
        who: &str,
        why: &str,
        mode: &str,
    ) -> Result<InhibitorLock, LogindError> {
        let fd = self
            .proxy
            .inhibit(what, who, why, mode)
            .await
            .map_err(|e| LogindError::from_call("Inhibit", e))?;
        let fd: OwnedFd = fd.into();
        // zbus receives fds without close-on-exec; a child process that
        // inherited the fd would keep the lock alive after we close ours.
        if let Err(e) = nix::fcntl::fcntl(
            &fd,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        ) {
            tracing::warn!(error = %e, "cannot set close-on-exec on the inhibitor fd");
        }
        Ok(InhibitorLock { _fd: fd })
    }

    /// Lists all inhibitors logind knows.
    pub async fn list_inhibitors(&self) -> Result<Vec<Inhibitor>, LogindError> {
        let rows = self
            .proxy
            .list_inhibitors()
            .await
            .map_err(|e| LogindError::from_call("ListInhibitors", e))?;
        Ok(rows
            .into_iter()
            .map(|(what, who, why, mode, uid, pid)| Inhibitor {
                what,
                who,
                why,
                mode,
                uid,
                pid,
            })
            .collect())
    }

    /// logind's delay budget: how long it waits on delay locks after
    /// `PrepareForShutdown(true)` before it proceeds regardless.
    pub async fn inhibit_delay_max(&self) -> Result<Duration, LogindError> {
        let usec = self
            .proxy
            .inhibit_delay_max_usec()
            .await
            .map_err(|e| LogindError::from_property("InhibitDelayMaxUSec", e))?;
        Ok(Duration::from_micros(usec))
    }

    /// Whether a shutdown is under way right now (read fresh every time).
    pub async fn preparing_for_shutdown(&self) -> Result<bool, LogindError> {
        self.proxy
            .preparing_for_shutdown()
            .await
            .map_err(|e| LogindError::from_property("PreparingForShutdown", e))
    }

    /// Asks logind to reboot.
    pub async fn reboot(&self) -> Result<(), LogindError> {
        self.proxy
            .reboot(false)
            .await
            .map_err(|e| LogindError::from_call("Reboot", e))
    }

    /// Asks logind to power off.
    pub async fn power_off(&self) -> Result<(), LogindError> {
        self.proxy
            .power_off(false)
            .await
            .map_err(|e| LogindError::from_call("PowerOff", e))
    }

    /// `PrepareForShutdown` as a stream of its argument. A signal whose body
    /// does not decode is skipped with a warning rather than ending the stream.
    pub async fn receive_prepare_for_shutdown(
        &self,
    ) -> Result<impl Stream<Item = bool> + Unpin + use<>, LogindError> {
        let stream = self
            .proxy
            .receive_prepare_for_shutdown()
            .await
            .map_err(|e| LogindError::from_call("subscribe PrepareForShutdown", e))?;
        Ok(stream.filter_map(|sig| {
            futures::future::ready(match sig.args() {
                Ok(a) => Some(a.start),
                Err(e) => {
                    tracing::warn!(error = %e, "ignoring malformed PrepareForShutdown signal");
                    None
                }
            })
        }))
    }

    /// `PrepareForSleep` as a stream of its argument (malformed ones skipped).
    pub async fn receive_prepare_for_sleep(
        &self,
    ) -> Result<impl Stream<Item = bool> + Unpin + use<>, LogindError> {
        let stream = self
            .proxy
            .receive_prepare_for_sleep()
            .await
            .map_err(|e| LogindError::from_call("subscribe PrepareForSleep", e))?;
        Ok(stream.filter_map(|sig| {
            futures::future::ready(match sig.args() {
                Ok(a) => Some(a.start),
                Err(e) => {
                    tracing::warn!(error = %e, "ignoring malformed PrepareForSleep signal");
                    None
                }
            })
        }))
    }

    /// Owner changes of `org.freedesktop.login1`: `None` when logind leaves
    /// the bus, `Some(unique name)` when a (restarted) logind takes it.
    pub async fn receive_owner_changed(
        &self,
    ) -> Result<impl Stream<Item = Option<String>> + Unpin + use<>, LogindError> {
        let stream = self
            .proxy
            .inner()
            .receive_owner_changed()
            .await
            .map_err(|e| LogindError::from_call("subscribe NameOwnerChanged", e))?;
        Ok(stream.map(|owner| owner.map(|o| o.to_string())))
    }
}
