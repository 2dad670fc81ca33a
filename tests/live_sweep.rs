//! A bridge killed outright while a live harness idles between turns
//! leaves that harness (and whatever it started) to the next bridge: a
//! harness that ignores the SIGTERM it gets when its bridge dies, and a
//! process it detached into a session of its own, both still run until
//! `serve` starts again on the same data folder, which ends them before it
//! listens. Its own binary: any bridge starting in the same namespace
//! sweeps what a dead one left, so no other test may start one meanwhile.

use harness_bridge_testkit as common;

use std::sync::Arc;

use common::server::ServeProcess;
use common::{alive, wait_until_gone};
use serde_json::json;

/// Answers every turn; on its first it starts `sleep` in a session of its
/// own (out of the harness's process group) and notes both pids. SIGTERM
/// is ignored by both, and the end of its input does not end it.
const SCRIPT: &str = r#"#!/bin/sh
trap '' TERM HUP
while IFS= read -r line; do
  case "$line" in
    *'"type":"user"'*)
      if [ ! -s "$CLINGY_PIDS" ]; then
        setsid sleep 300 </dev/null >/dev/null 2>&1 &
        echo "$$ $!" > "$CLINGY_PIDS"
      fi
      echo '{"type":"system","subtype":"init","session_id":"clingy-1","mcp_servers":[]}'
      echo '{"type":"assistant","message":{"content":[{"type":"text","text":"ok"}]},"session_id":"clingy-1"}'
      echo '{"type":"result","subtype":"success","is_error":false,"result":"ok","session_id":"clingy-1"}' ;;
  esac
done
# Its input closed (the bridge is gone): it lingers all the same.
exec sleep 300
"#;

/// Tests that watch what a bridge killed outright leaves behind: any
/// bridge that starts on this machine meanwhile sweeps it, so
/// `scripts/test` runs `alone::` tests after every other test binary.
mod alone {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_restarted_serve_ends_the_idle_live_harness_a_killed_one_left() {
        let tools = common::tempdir_for_harnesses();
        let harness = common::scripted::install_live(tools.path(), "clingy", SCRIPT);
        let pids_file = tools.path().join("pids");
        let config = format!(
            "{harness}kill_grace_seconds: 1\nset_env:\n  CLINGY_PIDS: {}\ncage:\n  read_write: [{}]\n",
            pids_file.display(),
            tools.path().display()
        );
        let env = [("PATH", std::env::var("PATH").unwrap_or_default())];
        let data = Arc::new(common::tempdir());
        let mut server = ServeProcess::spawn(data.clone(), &config, &env).await;

        let first = server
            .results(json!({"conversation": "clingy-chat", "text": "Hello", "run_id": "clingy-1"}))
            .await;
        let end = first.last().expect("results");
        assert_eq!(end["type"], "run.completed", "{first:?}");
        assert!(
            end["data"]["message"]["metadata"]["session"]["process"]["pid"].is_i64(),
            "the turn ran on a live process: {first:?}"
        );
        let pids = std::fs::read_to_string(&pids_file).unwrap();
        let pids: Vec<i32> = pids
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect();
        assert_eq!(pids.len(), 2, "{pids:?}");

        // The bridge dies with the harness idle: SIGTERM from the kernel is
        // ignored, the detached sleep is no child of the bridge's at all. The
        // kernel sends the parent-death signal as the bridge exits, before it
        // can be reaped: looked at once reaped, without waiting, since a
        // bridge another test binary starts meanwhile (the suite runs two at
        // once) sweeps what this dead one left, as the restart below does.
        server.child.start_kill().unwrap();
        server.child.wait().await.unwrap();
        for pid in &pids {
            assert!(
                alive(*pid),
                "process {pid} should outlive its bridge until a restart"
            );
        }

        let mut again = ServeProcess::spawn(data, &config, &env).await;
        for pid in &pids {
            wait_until_gone(*pid).await;
        }
        let status = again.stop().await;
        assert!(
            status.success(),
            "{status:?}: {}",
            again.log.lock().unwrap().join("\n")
        );
    }
}
