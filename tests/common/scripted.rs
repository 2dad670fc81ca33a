//! A scripted harness: a shell script that plays one, declared by an
//! operator's adapter spec. It records what it was given (env, stdin,
//! argv) in its working directory, then acts as `$FAKE_MODE` says. Each
//! turn appends `start PID` and `end PID` to `turn-log` there, so a test
//! can see whether turns of one conversation overlapped.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

pub const SCRIPT: &str = r#"#!/bin/sh
# Records what it was given, then acts as $FAKE_MODE says.
echo "start $$" >> turn-log
env > received-env
cat > received-stdin
printf '%s\n' "$@" > received-args
case "$FAKE_MODE" in
  crash)
    echo "loading config" >&2
    printf 'a byte that is not UTF-8: \377\n' >&2
    echo "fatal: auth failed with key sk-abcdefghijklmnopqrstuvwxyz0123 for $LANGBOT_MCP_TOKEN" >&2
    exit 2 ;;
  slow)
    sleep 1 ;;
  flood)
    # Ten megabytes of answer, more than socket buffers hold unread.
    echo '{"type":"system","subtype":"init","session_id":"scripted-1","mcp_servers":[]}'
    text=$(head -c 2000 /dev/zero | tr '\000' x)
    yes "{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"$text\"}]},\"session_id\":\"scripted-1\"}" | head -n 5000 ;;
  quote)
    # The model quotes the harness's own "session not found" words, then
    # the turn fails for another reason: not a missing session.
    echo '{"type":"system","subtype":"init","session_id":"scripted-1","mcp_servers":[]}'
    echo '{"type":"assistant","message":{"content":[{"type":"text","text":"The log says: No conversation found"}]},"session_id":"scripted-1"}'
    echo "end $$" >> turn-log
    echo '{"type":"result","subtype":"error_during_execution","is_error":true,"result":"tool failed","session_id":"scripted-1"}'
    exit 1 ;;
  hang)
    # A session id first, as real harnesses print: a stopped run then
    # stores its pointer on the way out. One child leaves the group, as
    # tools do (and keeps the harness's stdout open).
    echo '{"type":"system","subtype":"init","session_id":"scripted-hang","mcp_servers":[]}'
    sleep 300 &
    setsid sleep 300 &
    sleep 300
    exit 0 ;;
  stubborn)
    # Ignores SIGTERM, as does all it starts; one child leaves the group.
    trap '' TERM
    echo '{"type":"system","subtype":"init","session_id":"scripted-hang","mcp_servers":[]}'
    setsid sleep "300.$FAKE_TAG" >/dev/null 2>&1 &
    sleep "300.$FAKE_TAG"
    exit 0 ;;
  hardlink)
    # Hard links to files outside the workspace (the test's), then the
    # usual outbox and answer.
    mkdir -p outbox
    ln "$FAKE_LINK" outbox/linked.txt
    ln "$FAKE_BIG_LINK" outbox/linked.bin ;;
  shout)
    # One stderr line of 256 MiB, no newline; then it waits to be told.
    head -c 268435456 /dev/zero | tr '\000' x >&2
    touch shouted
    while [ ! -e done ]; do sleep 0.1; done
    exit 3 ;;
esac
if [ "$FAKE_MODE" != quiet ]; then
  mkdir -p outbox/charts
  printf 'hello' > outbox/note.txt
  head -c 2097152 /dev/zero > outbox/charts/big.bin
fi
echo '{"type":"system","subtype":"init","session_id":"scripted-1","mcp_servers":[{"name":"langbot","status":"connected"}]}'
echo 'not json at all'
echo '{"type":"assistant","message":{"content":[{"type":"text","text":"Done."}]},"session_id":"scripted-1"}'
echo "end $$" >> turn-log
# `usage`: the result says what the turn used, as a model's would.
usage=''
[ "$FAKE_MODE" = usage ] && usage=',"usage":{"input_tokens":5,"output_tokens":3}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"Done.","session_id":"scripted-1","stop_reason":"end_turn"'"$usage"'}'
"#;

pub const SPEC: &str = r#"
name: scripted
label: Scripted
description: A shell script that plays a harness.
binary: scripted-harness
argv:
  new: ["--new", "{prompt}"]
  resume: ["--resume", "{session_id}", "{prompt}"]
stdin: prompt
env:
  pass: [PATH, "FAKE_*"]
  set:
    FIXED_BY_SPEC: "1"
# It speaks Claude Code's formats but keeps its sessions its own way.
family: claude
skills_dir: .scripted/skills
session_not_found: "No conversation found"
session_store: unknown
session_id_format: token
install_hint: "it is written by the test"
"#;

/// Write the script (`DIR/scripted-harness`) and two specs using it
/// (`DIR/adapters/scripted.yaml`, `scripted-b.yaml`).
pub fn install(dir: &Path) {
    let script = dir.join("scripted-harness");
    std::fs::write(&script, SCRIPT).expect("write script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::create_dir_all(dir.join("adapters")).expect("adapters dir");
    std::fs::write(dir.join("adapters/scripted.yaml"), SPEC).expect("spec");
    // A second harness with the same script: a conversation may switch.
    let other = SPEC.replace("name: scripted", "name: scripted-b");
    std::fs::write(dir.join("adapters/scripted-b.yaml"), other).expect("spec b");
}

/// Install `script` as the live stream-json harness `name` (Claude Code's
/// family, its variables `NAME_*` passed through) under `dir`: its spec in
/// `DIR/adapters/`, the script beside it. Returns the `bridge.yaml` lines
/// that make it the default harness.
pub fn install_live(dir: &Path, name: &str, script: &str) -> String {
    let spec = format!(
        r#"name: {name}
label: {name}
description: A shell script that plays a live harness.
binary: {name}-harness
family: claude
argv:
  new: ["-p"]
  resume: ["-p", "--resume={{session_id}}"]
stdin: prompt
env:
  pass: [PATH, "{prefix}_*"]
session_store: unknown
session_id_format: token
install_hint: "the test writes it"
live:
  args: ["--input-format", "stream-json"]
"#,
        prefix = name.to_uppercase()
    );
    std::fs::create_dir_all(dir.join("adapters")).expect("adapters dir");
    std::fs::write(dir.join(format!("adapters/{name}.yaml")), spec).expect("spec");
    let path = dir.join(format!("{name}-harness"));
    std::fs::write(&path, script).expect("write script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    format!(
        "adapters: {}\nharness_binaries:\n  {name}: {}\ndefault_harness: {name}\n",
        dir.join("adapters").display(),
        path.display()
    )
}

/// A scripted agent of the Agent Client Protocol: it opens a session,
/// answers each prompt (after `$ACPSCRIPT_DELAY` seconds, "model time",
/// when set) and exits at the end of its input, as an agent that saves its
/// session then does. Into `$ACPSCRIPT_LOG` it writes `answered T` when it
/// answered a turn, `eof T` when its input ended and `term T` on SIGTERM
/// (T in seconds since the epoch), so a test sees how it was stopped.
pub const ACP_SCRIPT: &str = r#"#!/bin/sh
log="${ACPSCRIPT_LOG:-/dev/null}"
trap 'echo "term $(date +%s.%N)" >> "$log"; exit 143' TERM
while IFS= read -r line; do
  id=$(printf '%s\n' "$line" | sed -n 's/^{"jsonrpc":"2.0","id":\([0-9]*\),"method".*/\1/p')
  case "$line" in
    *'"method":"initialize"'*)
      echo "{\"jsonrpc\":\"2.0\",\"id\":$id,\"result\":{\"protocolVersion\":1,\"agentCapabilities\":{}}}" ;;
    *'"method":"session/new"'*)
      echo "{\"jsonrpc\":\"2.0\",\"id\":$id,\"result\":{\"sessionId\":\"acpscript-1\"}}" ;;
    *'"method":"session/prompt"'*)
      [ -n "$ACPSCRIPT_DELAY" ] && sleep "$ACPSCRIPT_DELAY"
      echo '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"acpscript-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Done."}}}}'
      echo "answered $(date +%s.%N)" >> "$log"
      echo "{\"jsonrpc\":\"2.0\",\"id\":$id,\"result\":{\"stopReason\":\"end_turn\"}}" ;;
  esac
done
echo "eof $(date +%s.%N)" >> "$log"
"#;

/// Install [`ACP_SCRIPT`] as the ACP agent `acpscript` under `dir`: its
/// spec in `DIR/adapters/`, the script beside it. Returns the script's
/// path (what `--bin` or `harness_binaries` names).
pub fn install_acp(dir: &Path) -> std::path::PathBuf {
    let spec = r#"name: acpscript
label: Scripted ACP agent
description: A shell script that plays an agent of the Agent Client Protocol.
binary: acpscript
family: acp
live:
  argv: []
acp:
  permissions: deny
env:
  pass: [PATH, "ACPSCRIPT_*"]
skills_dir: .agents/skills
install_hint: "the test writes it"
"#;
    std::fs::create_dir_all(dir.join("adapters")).expect("adapters dir");
    std::fs::write(dir.join("adapters/acpscript.yaml"), spec).expect("spec");
    let path = dir.join("acpscript");
    std::fs::write(&path, ACP_SCRIPT).expect("write script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}
