//! A private `dbus-daemon` for tests and `maintd demo --shutdown`: the
//! simulated logind (or python-dbusmock) owns `org.freedesktop.login1` on
//! it, and nothing on the host's system bus is touched.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Errors starting the private bus.
#[derive(Debug, thiserror::Error)]
pub enum PrivateBusError {
    /// The temporary directory for socket and config could not be made.
    #[error("cannot prepare {path} for the private D-Bus daemon: {source}")]
    Prepare {
        /// Where.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `dbus-daemon` did not start.
    #[error("cannot run dbus-daemon: {source}; install the `dbus` package")]
    Spawn {
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It started but did not print its address.
    #[error("dbus-daemon exited without printing its address (see its stderr)")]
    NoAddress,
}

/// A running `dbus-daemon` listening on a unix socket in a private
/// temporary directory. Killed, and the directory removed, on drop.
#[derive(Debug)]
pub struct PrivateBus {
    /// `unix:path=…`, without the daemon's guid so it stays valid across
    /// [`PrivateBus::restart`].
    pub address: String,
    /// The daemon process.
    pub child: Child,
    dir: PathBuf,
    socket: PathBuf,
    config: PathBuf,
}

impl PrivateBus {
    /// Starts `dbus-daemon --nofork --print-address` with a session-type
    /// config listening in a fresh temporary directory.
    pub fn start() -> Result<PrivateBus, PrivateBusError> {
        let dir = std::env::temp_dir().join(format!(
            "maintd-bus-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).map_err(|source| PrivateBusError::Prepare {
            path: dir.clone(),
            source,
        })?;
        let socket = dir.join("bus");
        let config = dir.join("bus.conf");
        std::fs::write(&config, config_text(&socket)).map_err(|source| {
            PrivateBusError::Prepare {
                path: config.clone(),
                source,
            }
        })?;
        let child = spawn_daemon(&config)?;
        Ok(PrivateBus {
            address: format!("unix:path={}", socket.display()),
            child,
            dir,
            socket,
            config,
        })
    }

    /// Kills the daemon and starts a new one on the same socket: every
    /// client connection breaks, as when the host's dbus-daemon restarts.
    pub fn restart(&mut self) -> Result<(), PrivateBusError> {
        self.stop();
        // dbus-daemon refuses to bind over a leftover socket file.
        let _ = std::fs::remove_file(&self.socket);
        self.child = spawn_daemon(&self.config)?;
        Ok(())
    }

    /// Kills the daemon; clients see their connection close.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for PrivateBus {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn spawn_daemon(config: &Path) -> Result<Child, PrivateBusError> {
    let mut child = Command::new("dbus-daemon")
        .arg(format!("--config-file={}", config.display()))
        .args(["--nofork", "--print-address"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        // As root it complains that it cannot raise its fd limit; harmless noise.
        .stderr(Stdio::null())
        .spawn()
        .map_err(|source| PrivateBusError::Spawn { source })?;
    // The address is printed once the socket listens: reading it is the
    // readiness check.
    let mut line = String::new();
    let read = match child.stdout.take() {
        Some(out) => BufReader::new(out).read_line(&mut line).ok(),
        None => None,
    };
    if read.unwrap_or(0) == 0 || line.trim().is_empty() {
        let _ = child.kill();
        let _ = child.wait();
        return Err(PrivateBusError::NoAddress);
    }
    Ok(child)
}

fn config_text(socket: &Path) -> String {
    format!(
        r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"#,
        socket.display()
    )
}
