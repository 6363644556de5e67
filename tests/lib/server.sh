# A server under test: start_server LOG COMMAND... runs COMMAND in the background and waits for the
# port it prints ("serving ... on http://127.0.0.1:PORT"), setting $server_pid and $port (status 1 if
# it exits first or prints none within 60 s); stop_server sends SIGTERM and returns its exit status
# within 30 s (124 if it hangs, after SIGKILL). cleanup_server_and WORK, for the caller's EXIT trap,
# kills a server still running and removes the directory WORK.
server_pid=""
cleanup_server_and() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$1"
}
start_server() {
  local log=$1
  shift
  "$@" >"$log" 2>&1 &
  server_pid=$!
  port=""
  for _ in $(seq 1 600); do
    port=$(grep -o "serving .* on http://127.0.0.1:[0-9]*" "$log" | grep -o "[0-9]*$")
    [ -n "$port" ] && return 0
    kill -0 "$server_pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
stop_server() {
  kill -TERM "$server_pid"
  for _ in $(seq 1 300); do
    if ! kill -0 "$server_pid" 2>/dev/null; then
      wait "$server_pid"
      local rc=$?
      server_pid=""
      return $rc
    fi
    sleep 0.1
  done
  kill -KILL "$server_pid"
  server_pid=""
  return 124
}

