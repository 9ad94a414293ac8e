//! The agent's side of the node helper's socket.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;

use super::{FileOp, MAX_REPLY, Request, decode_reply};

/// How long a file operation may take in the helper (it renames and
/// fsyncs a handful of files) before the agent gives up on it.
const FILE_OP_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the helper could not do what the agent asked.
#[derive(Debug, thiserror::Error)]
pub enum HelperError {
    /// Nothing answers on the socket.
    #[error(
        "cannot reach maintd's node helper at {socket}: {error}; is its container (maintd node-helper) running?"
    )]
    Unreachable { socket: PathBuf, error: String },
    /// The helper answered with an error.
    #[error("{0}")]
    Failed(String),
    /// The reply could not be read.
    #[error("the node helper at {socket} gave a reply maintd cannot read: {error}")]
    BadReply { socket: PathBuf, error: String },
}

/// Talks to `maintd node-helper`.
#[derive(Debug, Clone, PartialEq)]
pub struct HelperClient {
    pub socket: PathBuf,
}

impl HelperClient {
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        HelperClient {
            socket: socket.into(),
        }
    }

    /// Does one static pod manifest operation and returns its result. It
    /// blocks (at most [`FILE_OP_TIMEOUT`]), as the same operation on local
    /// files would.
    pub fn files<T: DeserializeOwned>(&self, op: FileOp) -> Result<T, HelperError> {
        let unreachable = |e: std::io::Error| HelperError::Unreachable {
            socket: self.socket.clone(),
            error: e.to_string(),
        };
        let mut stream = UnixStream::connect(&self.socket).map_err(unreachable)?;
        stream
            .set_read_timeout(Some(FILE_OP_TIMEOUT))
            .map_err(unreachable)?;
        stream
            .set_write_timeout(Some(FILE_OP_TIMEOUT))
            .map_err(unreachable)?;
        let mut line = serde_json::to_vec(&Request::Files(op)).map_err(|e| self.bad(e))?;
        line.push(b'\n');
        stream.write_all(&line).map_err(unreachable)?;
        let mut reply = String::new();
        BufReader::new(stream.take(MAX_REPLY))
            .read_line(&mut reply)
            .map_err(|e| self.bad(e))?;
        decode_reply(&reply)
            .map_err(|e| self.bad(e))?
            .map_err(HelperError::Failed)
    }

    /// Opens a hold session (see [`crate::inhibitor`]'s remote holder).
    pub(crate) async fn connect(&self) -> Result<tokio::net::UnixStream, HelperError> {
        tokio::net::UnixStream::connect(&self.socket)
            .await
            .map_err(|e| HelperError::Unreachable {
                socket: self.socket.clone(),
                error: e.to_string(),
            })
    }

    fn bad(&self, e: impl std::fmt::Display) -> HelperError {
        HelperError::BadReply {
            socket: self.socket.clone(),
            error: e.to_string(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.socket
    }
}
