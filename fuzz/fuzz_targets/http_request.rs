//! The agent's HTTP endpoint, from the bytes on the wire: hyper's request
//! parser, the routes and the drain request's body, on each listener (the
//! read-only one, the local unix socket, FleetLock's), from root, from
//! another user, or from a caller the kernel did not name. Input: one byte
//! choosing the listener and the caller, then what the client sends.
//! Checks: every answer is HTTP (1.1, or 1.0 to 1.0) with a status, and every error the
//! agent gives is JSON saying why in words; a drain is recorded only when
//! asked on the unix socket by root (nobody else may ask for one); the
//! body read is bounded.
#![no_main]

use libfuzzer_sys::fuzz_target;
use maintd::http::{Peer, Role};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The answers in `out`, as (status, content type, body).
fn answers(out: &[u8]) -> Vec<(u16, String, Vec<u8>)> {
    let mut found = Vec::new();
    let mut rest = out;
    while !rest.is_empty() {
        let Some(end) = rest.windows(4).position(|w| w == b"\r\n\r\n") else {
            panic!(
                "an answer without the end of its head: {:?}",
                String::from_utf8_lossy(rest)
            );
        };
        let head = String::from_utf8_lossy(&rest[..end]).into_owned();
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or_default();
        // HTTP/1.0 is answered in kind.
        assert!(
            status_line.starts_with("HTTP/1.1 ") || status_line.starts_with("HTTP/1.0 "),
            "not HTTP: {status_line:?}"
        );
        let code: u16 = status_line[9..12].parse().expect("a status code");
        let mut length = 0usize;
        let mut kind = String::new();
        for l in lines {
            let (k, v) = l.split_once(':').unwrap_or((l, ""));
            match k.to_ascii_lowercase().as_str() {
                "content-length" => length = v.trim().parse().expect("a length"),
                "content-type" => kind = v.trim().to_string(),
                _ => {}
            }
        }
        let body_start = end + 4;
        let body = rest[body_start..body_start + length].to_vec();
        rest = &rest[body_start + length..];
        found.push((code, kind, body));
    }
    found
}

fuzz_target!(|data: &[u8]| {
    let Some((&choice, sent)) = data.split_first() else {
        return;
    };
    let role = [Role::ReadOnly, Role::Local, Role::FleetLock][usize::from(choice % 3)];
    let me = nix::unistd::geteuid().as_raw();
    let peer = match (choice / 3) % 4 {
        0 => Peer {
            uid: Some(0),
            unix: true,
        },
        1 => Peer {
            uid: Some(me.wrapping_add(1000)),
            unix: true,
        },
        2 => Peer {
            uid: None,
            unix: true,
        },
        _ => Peer {
            uid: None,
            unix: false,
        },
    };
    let may_drain = role == Role::Local && peer.unix && peer.uid.is_some_and(|u| u == 0 || u == me);
    let endpoint = maintd::fuzzing::http_endpoint(role, "node-a");
    let local = endpoint.local_requests.clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let out = rt.block_on(async {
        let (client, server) = tokio::io::duplex(1 << 20);
        let serve = maintd::fuzzing::serve_http(endpoint, server, peer);
        let talk = async move {
            let (mut read, mut write) = tokio::io::split(client);
            let send = async {
                let _ = write.write_all(sent).await;
                let _ = write.shutdown().await;
            };
            let mut out = Vec::new();
            let receive = read.read_to_end(&mut out);
            let (_, _) = tokio::join!(send, receive);
            out
        };
        let ((), out) = tokio::join!(serve, talk);
        out
    });
    // An answer to HEAD has no body, whatever its length says: only the
    // first status line is read then.
    if sent.windows(4).any(|w| w == b"HEAD") {
        if !out.is_empty() {
            assert!(out.starts_with(b"HTTP/1."));
        }
    } else {
        check_answers(&out);
    }
    if !may_drain {
        assert!(
            local.current().is_none(),
            "a drain asked by someone who may not"
        );
    }
});

fn check_answers(out: &[u8]) {
    for (code, kind, body) in answers(out) {
        assert!((100..600).contains(&code));
        if kind == "application/json" && code >= 400 {
            let v: serde_json::Value = serde_json::from_slice(&body).expect("an error is JSON");
            let why = v["error"].as_str().expect("an error says why");
            assert!(!why.trim().is_empty());
        }
    }
}
