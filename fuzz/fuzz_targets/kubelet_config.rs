//! The kubelet's config file, read for its `staticPodPath` (YAML or JSON,
//! as kubeadm, k3s and RKE2 write it). Input: the file's text. Checks: a
//! path found is not blank; a file that is not YAML is said in words.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match maintd::fuzzing::kubelet_static_pod_path(text) {
        Ok(Some(dir)) => {
            let s = dir.to_string_lossy();
            assert!(
                !s.trim().is_empty() && s.trim() == s,
                "a path found is trimmed and not blank"
            );
        }
        Ok(None) => {}
        Err(e) => assert!(
            !e.trim().is_empty(),
            "a file that is not YAML is said in words"
        ),
    }
});
