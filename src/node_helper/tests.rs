use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use tokio_util::sync::CancellationToken;

use super::*;
use crate::drain::static_pods::{Manifest, RestoreReport, StashReport, StaticPodStash};

const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: etcd}\nspec: {}\n";

/// A helper serving a static pod directory in a temporary directory.
async fn helper(dir: &Path) -> (HelperClient, CancellationToken) {
    let manifests = dir.join("manifests");
    std::fs::create_dir(&manifests).unwrap();
    let socket = dir.join("helper.sock");
    let config = HelperConfig {
        socket: socket.clone(),
        agent_uid: nix::unistd::geteuid().as_raw(),
        agent_gid: nix::unistd::getegid().as_raw(),
        stash: StaticPodStash::new(manifests, None),
        bus: crate::logind::BusAddress::Address("unix:path=/nonexistent/bus".into()),
        relay: None,
    };
    let stop = CancellationToken::new();
    tokio::spawn(serve(config, stop.clone()));
    // Listening, not only bound: the socket's file is there a moment
    // before it takes connections, and a call then is refused.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the helper did not listen on {}",
            socket.display()
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    (HelperClient::new(socket), stop)
}

/// `op` done by `client` off the runtime's threads (the call blocks).
async fn files<T: serde::de::DeserializeOwned + Send + 'static>(
    client: &HelperClient,
    op: FileOp,
) -> Result<T, HelperError> {
    let client = client.clone();
    tokio::task::spawn_blocking(move || client.files(op))
        .await
        .unwrap()
}

/// Sends `bytes` as they are and reads the one-line reply.
async fn raw(client: &HelperClient, bytes: Vec<u8>) -> String {
    let socket = client.socket.clone();
    tokio::task::spawn_blocking(move || {
        let mut s = std::os::unix::net::UnixStream::connect(socket).unwrap();
        // The helper may stop reading before the end of a line too long.
        let _ = s.write_all(&bytes);
        let mut reply = String::new();
        BufReader::new(s).read_line(&mut reply).unwrap();
        reply
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_helper_moves_only_manifests_of_its_own_directory() {
    let dir = tempfile::tempdir().unwrap();
    let (client, stop) = helper(dir.path()).await;
    let manifests = dir.path().join("manifests");
    std::fs::write(manifests.join("etcd.yaml"), POD).unwrap();
    std::fs::write(dir.path().join("outside.yaml"), POD).unwrap();

    let listed: Vec<Manifest> = files(&client, FileOp::Manifests).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].pod_name.as_deref(), Some("etcd"));
    let files_asked = vec![
        "../outside.yaml".to_string(),
        "/etc/passwd".to_string(),
        "etcd.yaml".to_string(),
    ];
    let report: StashReport = files(
        &client,
        FileOp::Stash {
            files: Some(files_asked),
        },
    )
    .await
    .unwrap();
    assert_eq!(
        report.stashed,
        ["etcd.yaml"],
        "only a file of its directory"
    );
    assert!(dir.path().join("outside.yaml").exists());
    let stashed: Vec<Manifest> = files(&client, FileOp::StashedManifests).await.unwrap();
    assert_eq!(stashed[0].file, "etcd.yaml");
    assert!(stashed[0].changed_ago_ms.is_some(), "when it was moved");

    let restored: RestoreReport = files(&client, FileOp::Restore).await.unwrap();
    assert_eq!(restored.restored, ["etcd.yaml"]);
    assert!(manifests.join("etcd.yaml").exists());
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_request_gets_an_error_that_says_why_and_the_helper_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (client, stop) = helper(dir.path()).await;

    let reply = raw(&client, b"{\"files\": \"format_disk\"}\n".to_vec()).await;
    assert!(
        reply.contains("error") && reply.contains("not a request the node helper knows"),
        "{reply}"
    );
    let mut huge = vec![b'x'; 100 * 1024];
    huge.push(b'\n');
    let reply = raw(&client, huge).await;
    assert!(reply.contains("longer than"), "{reply}");

    let stashed: Vec<String> = files(&client, FileOp::Stashed).await.unwrap();
    assert!(stashed.is_empty(), "still serving");
    // A directory that is gone is the helper's error, passed on in words.
    std::fs::remove_dir(dir.path().join("manifests")).unwrap();
    let err = files::<Vec<Manifest>>(&client, FileOp::Manifests)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_without_a_helper_is_told_where_it_looked() {
    let dir = tempfile::tempdir().unwrap();
    let client = HelperClient::new(dir.path().join("nothing.sock"));
    let err = files::<Vec<String>>(&client, FileOp::Stashed)
        .await
        .unwrap_err();
    assert!(matches!(err, HelperError::Unreachable { .. }), "{err}");
    assert!(err.to_string().contains("nothing.sock"), "{err}");
}

/// A reply that says the helper failed, without a word of why, still gives
/// the agent an error in words. Found by the `node_helper` fuzz target.
#[test]
fn a_failure_without_words_is_said_in_words() {
    let said = decode_reply::<Vec<String>>("{\"error\":\"\"}\n")
        .unwrap()
        .unwrap_err();
    assert!(said.contains("failed without saying why"), "{said}");
    assert_eq!(
        decode_reply::<Vec<String>>("{\"error\":\"no room\"}\n").unwrap(),
        Err("no room".to_string())
    );
    assert!(decode_reply::<Vec<String>>("{\"ok\": 7}\n").is_err());
}
