//! deploy/ on the real node as an operator installs it: maintd's image
//! imported (or rebuilt), an overlay of deploy/ applied with kubectl, the
//! DaemonSet's pod and its endpoint on the node's address.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;

use super::node::{RealNode, all_ready, root, script};

impl RealNode {
    /// Imports `archive` into the node's containerd as `localhost/maintd:TAG`.
    pub async fn import_maintd(&self, archive: &Path, tag: &str) -> String {
        let image = format!("localhost/maintd:{tag}");
        script(
            "scripts/real-node",
            &[
                "import",
                &self.dir.to_string_lossy(),
                &archive.to_string_lossy(),
                &image,
            ],
        )
        .await;
        image
    }
    /// maintd's image built again by scripts/build-image, from the same
    /// binary (the amd64 one, taken out of `archive`) at another time: a
    /// new image (its config, hence its ID, differs), as a release rebuilt
    /// under a new tag (amd64 alone: only the binary given).
    pub async fn rebuilt_image(&self, archive: &Path) -> PathBuf {
        let work = self.work.path().join("rebuilt");
        std::fs::create_dir_all(work.join("x")).expect("a directory for the rebuild");
        let out = work.join("maintd-rebuilt.oci.tar");
        let status = tokio::process::Command::new("bash")
            .args([
                "-euo",
                "pipefail",
                "-c",
                r#"work=$1 archive=$2 out=$3
                tar -C "$work/x" -xf "$archive"
                i=$(jq -r '.manifests[0].digest' "$work/x/index.json")
                m=$(jq -r '.manifests[] | select(.platform.architecture == "amd64") | .digest' \
                  "$work/x/blobs/sha256/${i#sha256:}")
                l=$(jq -r '.layers[0].digest' "$work/x/blobs/sha256/${m#sha256:}")
                tar -C "$work" -xzf "$work/x/blobs/sha256/${l#sha256:}" usr/bin/maintd
                SOURCE_DATE_EPOCH=$(date +%s) scripts/build-image --binary "$work/usr/bin/maintd" \
                  --name localhost/maintd-rebuilt --out "$out" >"$work/build-image.log""#,
                "rebuild",
            ])
            .arg(&work)
            .arg(archive)
            .arg(&out)
            .current_dir(root())
            .status()
            .await
            .expect("bash runs");
        assert!(
            status.success(),
            "rebuilding maintd's image failed; see {}",
            work.join("build-image.log").display()
        );
        out
    }
    /// The overlay of deploy/ this node's operator would write: maintd's
    /// imported image `localhost/maintd:TAG`, never pulled; the endpoint
    /// on the node's address (deploy/prometheus' patch: scraped there);
    /// the API server where this cluster has it (no kube-proxy here to
    /// serve the `kubernetes` Service's ClusterIP); only on nodes that run
    /// a real kubelet (KWOK's fake nodes run no image).
    pub fn overlay(&self, tag: &str) -> PathBuf {
        let dir = self.work.path().join("overlay");
        std::fs::create_dir_all(&dir).expect("the overlay's directory");
        // kustomize takes a base by relative path only.
        let up = "../".repeat(dir.components().count() - 1);
        let deploy = root().join("deploy");
        let base = format!("{up}{}", deploy.to_string_lossy().trim_start_matches('/'));
        let server = std::fs::read_to_string(self.cp.join("server")).expect("the API's address");
        let port = server
            .trim()
            .rsplit(':')
            .next()
            .expect("a port")
            .to_string();
        let text = format!(
            r#"apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - {base}
images:
  - name: ghcr.io/maintd/maintd
    newName: localhost/maintd
    newTag: {tag}
patches:
  - patch: |-
      apiVersion: apps/v1
      kind: DaemonSet
      metadata:
        name: maintd
        namespace: maintd
      spec:
        template:
          spec:
            nodeSelector:
              maintd.io/e2e-real-node: "true"
            containers:
              - name: maintd
                imagePullPolicy: Never
                env:
                  - name: KUBERNETES_SERVICE_HOST
                    value: "127.0.0.1"
                  - name: KUBERNETES_SERVICE_PORT
                    value: "{port}"
                  - name: POD_IP
                    valueFrom:
                      fieldRef:
                        fieldPath: status.podIP
                  - name: MAINTD_LISTEN
                    value: $(POD_IP):9477
                readinessProbe:
                  httpGet:
                    host: null
                livenessProbe:
                  httpGet:
                    host: null
              - name: node-helper
                imagePullPolicy: Never
"#
        );
        std::fs::write(dir.join("kustomization.yaml"), text).expect("the overlay is written");
        dir
    }
    /// `kubectl apply -k` of the overlay for `localhost/maintd:TAG`.
    pub fn apply(&self, tag: &str) {
        let overlay = self.overlay(tag);
        let overlay = overlay.to_string_lossy();
        // The CRDs and the namespace come in the same apply; what lives in
        // them can be refused for a moment.
        for attempt in 0.. {
            match self.kubectl(&["apply", "-k", &overlay]) {
                (true, _, _) => break,
                (false, _, err) if attempt < 10 => {
                    eprintln!("kubectl apply -k again: {err}");
                    std::thread::sleep(Duration::from_secs(1));
                }
                (false, _, err) => panic!("kubectl apply -k {overlay}: {err}"),
            }
        }
    }
    /// maintd's pod on this node once it runs with both containers ready
    /// (the agent's readiness probe is its /readyz).
    pub async fn maintd_pod(&self, client: &kube::Client, patience: Duration) -> Pod {
        let api: Api<Pod> = Api::namespaced(client.clone(), "maintd");
        let lp = ListParams::default().fields(&format!("spec.nodeName={}", self.name));
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let pods = api.list(&lp).await.map(|l| l.items).unwrap_or_default();
            let ready: Vec<Pod> = pods
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none() && all_ready(p))
                .collect();
            if ready.len() == 1 {
                return ready.into_iter().next().expect("one pod");
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "maintd's pod on {} is not running with both containers ready: {}",
                self.name,
                self.kubectl(&["-n", "maintd", "get", "pods", "-o", "wide"])
                    .1
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    /// GET `path` from the agent's endpoint on the node's address.
    pub async fn endpoint(&self, path: &str) -> (u16, String) {
        let out = tokio::process::Command::new("curl")
            .args(["-s", "-m", "5", "-w", "\n%{http_code}"])
            .arg(format!("http://{}:9477{path}", self.ip))
            .output()
            .await
            .expect("curl runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().parse().unwrap_or(0), body.to_string())
    }
}
