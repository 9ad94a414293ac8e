use super::*;

fn setup(files: &[(&str, &str)]) -> (tempfile::TempDir, StaticPodStash) {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("manifests");
    fs::create_dir(&dir).unwrap();
    for (name, body) in files {
        fs::write(dir.join(name), body).unwrap();
    }
    let stash = StaticPodStash::new(dir, None);
    (root, stash)
}

fn contents(dir: &Path) -> Vec<(String, String)> {
    let mut out: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_file())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                fs::read_to_string(e.path()).unwrap_or_default(),
            )
        })
        .collect();
    out.sort();
    out
}

const ETCD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\n  namespace: kube-system\nspec:\n  containers: [{name: etcd, image: etcd}]\n";
const API: &str =
    "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"kube-apiserver\"}}";

#[test]
fn stash_then_restore_gives_back_identical_files() {
    let (_root, s) = setup(&[("etcd.yaml", ETCD), ("kube-apiserver.json", API)]);
    let before = contents(&s.manifest_dir);
    let report = s.stash(None).unwrap();
    assert_eq!(report.stashed, ["etcd.yaml", "kube-apiserver.json"]);
    assert!(contents(&s.manifest_dir).is_empty());
    assert_eq!(s.stashed().unwrap().len(), 2);
    let r = s.restore().unwrap();
    assert_eq!(r.restored.len(), 2);
    assert!(r.conflicts.is_empty());
    assert_eq!(contents(&s.manifest_dir), before);
    assert!(s.stashed().unwrap().is_empty());
}

#[test]
fn the_stash_is_a_private_dot_directory_inside_the_manifests() {
    let (_root, s) = setup(&[("etcd.yaml", ETCD)]);
    assert_eq!(s.stash_dir, s.manifest_dir.join(".maintd-stash"));
    s.stash(None).unwrap();
    let mode = fs::metadata(&s.stash_dir).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o700);
    assert!(
        s.manifests().unwrap().is_empty(),
        "the stash is not a manifest"
    );
}

#[test]
fn what_an_earlier_release_stashed_beside_the_directory_is_restored_too() {
    let (_root, s) = setup(&[("etcd.yaml", ETCD), ("kube-apiserver.yaml", API)]);
    let before = contents(&s.manifest_dir);
    // An agent of an earlier release stashed beside the directory, then
    // the node was upgraded mid-maintenance.
    let beside = s.manifest_dir.with_file_name("manifests.maintd-stash");
    let earlier = StaticPodStash::new(s.manifest_dir.clone(), Some(beside.clone()));
    earlier.stash(None).unwrap();
    assert!(s.manifests().unwrap().is_empty());
    let r = s.restore().unwrap();
    assert_eq!(r.restored.len(), 2, "{r:?}");
    assert_eq!(contents(&s.manifest_dir), before);
    assert!(earlier.stashed().unwrap().is_empty());
}

#[test]
fn manifests_are_read_with_their_pod_names_and_bad_ones_reported() {
    let (_root, s) = setup(&[
        ("etcd.yaml", ETCD),
        ("broken.yaml", "metadata: [unclosed"),
        (".hidden.yaml", ETCD),
        ("noname.yaml", "kind: Pod\n"),
    ]);
    let m = s.manifests().unwrap();
    let files: Vec<_> = m.iter().map(|m| m.file.as_str()).collect();
    assert_eq!(
        files,
        ["broken.yaml", "etcd.yaml", "noname.yaml"],
        "dotfiles are not the kubelet's"
    );
    assert_eq!(m[1].pod_name.as_deref(), Some("etcd"));
    assert_eq!(m[1].namespace.as_deref(), Some("kube-system"));
    assert!(m[0].error.is_some());
    assert!(m[2].error.as_deref().unwrap().contains("metadata.name"));
    assert_eq!(m[0].grace_seconds, DEFAULT_GRACE_SECONDS);
    assert_eq!(
        m[1].grace_seconds, DEFAULT_GRACE_SECONDS,
        "unset: the default"
    );
    // A malformed manifest still moves and comes back intact.
    s.stash(None).unwrap();
    s.restore().unwrap();
    assert_eq!(
        fs::read_to_string(s.manifest_dir.join("broken.yaml")).unwrap(),
        "metadata: [unclosed"
    );
    assert_eq!(
        StaticPodStash::mirror_pod_name("etcd", "node-a"),
        "etcd-node-a"
    );
}

#[test]
fn stash_only_named_files_and_is_idempotent() {
    let (_root, s) = setup(&[("etcd.yaml", ETCD), ("kube-apiserver.json", API)]);
    let r = s.stash(Some(&["etcd.yaml".to_string()])).unwrap();
    assert_eq!(r.stashed, ["etcd.yaml"]);
    let again = s.stash(Some(&["etcd.yaml".to_string()])).unwrap();
    assert!(again.stashed.is_empty());
    assert_eq!(contents(&s.manifest_dir).len(), 1);
    assert_eq!(s.stashed().unwrap(), ["etcd.yaml"]);
}

#[test]
fn restore_never_overwrites_a_file_an_admin_put_back() {
    let (_root, s) = setup(&[("etcd.yaml", ETCD)]);
    s.stash(None).unwrap();
    fs::write(s.manifest_dir.join("etcd.yaml"), "admin's version").unwrap();
    let r = s.restore().unwrap();
    assert!(r.restored.is_empty());
    assert_eq!(r.conflicts.len(), 1);
    assert_eq!(
        fs::read_to_string(s.manifest_dir.join("etcd.yaml")).unwrap(),
        "admin's version"
    );
    let kept = fs::read_to_string(s.stash_dir.join(&r.conflicts[0])).unwrap();
    assert_eq!(kept, ETCD, "the stashed copy is kept too");
    assert!(
        s.stashed().unwrap().is_empty(),
        "a kept conflict copy is not restored again"
    );
    assert!(s.restore().unwrap().conflicts.is_empty());
}

#[test]
fn a_missing_manifest_directory_is_an_error_not_a_panic() {
    let root = tempfile::tempdir().unwrap();
    let s = StaticPodStash::new(root.path().join("nope"), None);
    assert!(matches!(
        s.manifests(),
        Err(StashError::ManifestDirMissing(_))
    ));
    let err = s.stash(None).unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
    assert_eq!(s.restore().unwrap(), RestoreReport::default());
    assert!(s.stashed().unwrap().is_empty());
}

#[test]
fn an_unreadable_manifest_directory_is_an_error() {
    // Root reads any directory; a file where the directory should be is
    // unreadable as a directory for everyone.
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join("manifests");
    fs::write(&path, "not a directory").unwrap();
    let s = StaticPodStash::new(path, None);
    assert!(s.manifests().is_err());
    assert!(s.stash(None).is_err());
}

#[test]
fn a_stash_on_another_filesystem_is_refused() {
    let (_root, s) = setup(&[("etcd.yaml", ETCD)]);
    let shm = Path::new("/dev/shm");
    let same = fs::metadata(shm)
        .map(|m| m.dev() == fs::metadata(&s.manifest_dir).unwrap().dev())
        .unwrap_or(true);
    if same {
        eprintln!("/dev/shm is not a separate filesystem here; nothing to check");
        return;
    }
    let other = tempfile::tempdir_in(shm).unwrap();
    let s = StaticPodStash::new(s.manifest_dir.clone(), Some(other.path().join("stash")));
    let err = s.stash(None).unwrap_err();
    assert!(
        matches!(err, StashError::DifferentFilesystem { .. }),
        "{err}"
    );
    assert_eq!(contents(&s.manifest_dir).len(), 1, "nothing moved");
}

/// Every state a kill can leave behind — a journal with no move done, some
/// moves done, all done but the journal still there, a half-written journal
/// — ends, after the next call, with every manifest back and intact.
#[test]
fn a_kill_at_any_point_loses_no_manifest() {
    let files = [
        ("etcd.yaml", ETCD),
        ("kube-apiserver.json", API),
        ("proxy.yaml", "kind: Pod\nmetadata: {name: proxy}\n"),
    ];
    for (op, moved) in [
        ("stash", 0),
        ("stash", 1),
        ("stash", 2),
        ("stash", 3),
        ("restore", 1),
        ("restore", 3),
    ] {
        for journal in ["whole", "torn", "tmp-only"] {
            let (_root, s) = setup(&files);
            let before = contents(&s.manifest_dir);
            fs::DirBuilder::new()
                .mode(0o700)
                .create(&s.stash_dir)
                .unwrap();
            let names: Vec<String> = files.iter().map(|(n, _)| n.to_string()).collect();
            if op == "restore" {
                for n in &names {
                    fs::rename(s.manifest_dir.join(n), s.stash_dir.join(n)).unwrap();
                }
            }
            match journal {
                "whole" => s.write_journal(op, &names).unwrap(),
                "torn" => fs::write(s.stash_dir.join(JOURNAL), "{\"op\":\"sta").unwrap(),
                _ => fs::write(s.stash_dir.join(format!("{JOURNAL}.tmp")), "{").unwrap(),
            }
            for n in names.iter().take(moved) {
                let (from, to) = if op == "stash" {
                    (&s.manifest_dir, &s.stash_dir)
                } else {
                    (&s.stash_dir, &s.manifest_dir)
                };
                fs::rename(from.join(n), to.join(n)).unwrap();
            }
            // The agent starts again and, with no maintenance active, restores.
            let fresh = StaticPodStash::new(s.manifest_dir.clone(), None);
            let r = fresh.restore().unwrap();
            assert_eq!(
                contents(&fresh.manifest_dir),
                before,
                "{op} after {moved} moves, journal {journal}: {r:?}"
            );
            assert!(!fresh.stash_dir.join(JOURNAL).exists());
            // The interrupted operation is reported, by name when its
            // journal was whole; a journal never renamed into place means
            // no operation had started.
            match journal {
                "whole" => assert_eq!(
                    r.recovered.as_deref(),
                    Some(format!("an interrupted {op} of {}", names.join(", ")).as_str())
                ),
                "torn" => assert!(
                    r.recovered
                        .as_deref()
                        .is_some_and(|w| w.contains("unreadable")),
                    "{r:?}"
                ),
                _ => assert_eq!(r.recovered, None),
            }
        }
    }
}

/// The grace the kubelet gives a static pod is read from its manifest; a
/// negative one (which the API server would refuse) counts as the default.
/// Once moved, the stashed manifests are read the same way, which is how a
/// restarted agent knows the static pods it already stopped.
#[test]
fn grace_periods_are_read_from_manifests_in_place_and_in_the_stash() {
    let (_root, s) = setup(&[
        ("etcd.yaml", ETCD),
        (
            "short.yaml",
            "kind: Pod\nmetadata: {name: short}\nspec: {terminationGracePeriodSeconds: 7}\n",
        ),
        (
            "zero.yaml",
            "kind: Pod\nmetadata: {name: zero}\nspec: {terminationGracePeriodSeconds: 0}\n",
        ),
        (
            "negative.yaml",
            "kind: Pod\nmetadata: {name: negative}\nspec: {terminationGracePeriodSeconds: -5}\n",
        ),
    ]);
    let graces = |m: Vec<Manifest>| -> Vec<(String, i64)> {
        m.into_iter().map(|m| (m.file, m.grace_seconds)).collect()
    };
    let want = vec![
        ("etcd.yaml".to_string(), DEFAULT_GRACE_SECONDS),
        ("negative.yaml".to_string(), DEFAULT_GRACE_SECONDS),
        ("short.yaml".to_string(), 7),
        ("zero.yaml".to_string(), 0),
    ];
    assert_eq!(graces(s.manifests().unwrap()), want);
    assert!(s.stashed_manifests().unwrap().is_empty(), "no stash yet");
    s.stash(Some(&["short.yaml".to_string(), "etcd.yaml".to_string()]))
        .unwrap();
    let stashed = s.stashed_manifests().unwrap();
    assert_eq!(graces(stashed.clone()), [want[0].clone(), want[2].clone()]);
    assert_eq!(stashed[0].pod_name.as_deref(), Some("etcd"));
    assert_eq!(stashed[0].namespace.as_deref(), Some("kube-system"));
}

/// A static pod directory removed while its manifests were stashed (an
/// admin cleaning up, a reinstalled kubelet) is made again on restore, and
/// every manifest comes back into it.
#[test]
fn restore_makes_a_removed_manifest_directory_again() {
    let (_root, s) = setup(&[("etcd.yaml", ETCD), ("kube-apiserver.json", API)]);
    // A stash set outside the directory (--static-pod-stash) outlives it.
    let outside = s.manifest_dir.with_file_name("elsewhere");
    let s = StaticPodStash::new(s.manifest_dir.clone(), Some(outside));
    let before = contents(&s.manifest_dir);
    s.stash(None).unwrap();
    fs::remove_dir(&s.manifest_dir).unwrap();
    let r = s.restore().unwrap();
    assert_eq!(r.restored, ["etcd.yaml", "kube-apiserver.json"]);
    assert_eq!(contents(&s.manifest_dir), before);
}
