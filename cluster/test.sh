#!/usr/bin/env bash
# The cluster's end-to-end check: up.sh, node Ready, five pods of the local
# busybox image Running and Ready (an HTTP readiness probe the kubelet sends
# from the host), `kubectl logs` and `kubectl exec` on each, each pod's IP
# reached from the host and from another pod, then down.sh, which must leave
# nothing behind. Prints the timings and a closing "N passed, N failed" line.
# A failure prints what failed and the end of the logs concerned.
#   cluster/test.sh
# Without the binaries or the Debian packages (cluster/build.sh makes both)
# it says so and skips; with CI set that is a failure.
set -euo pipefail
# shellcheck source=env.sh
. "$(dirname "$0")/env.sh"

PODS=${STOCKADE_CLUSTER_PODS:-5}
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }
fail() {
  failed=$((failed + 1))
  echo "FAILED: $*" >&2
}

missing() {
  if [ -n "${CI:-}" ]; then
    echo "FAILED: $*" >&2
    echo "0 passed, 1 failed"
    exit 1
  fi
  echo "skipped: $*" >&2
  echo "0 passed, 0 failed, 1 skipped"
  exit 0
}
[ "$(id -u)" = 0 ] || missing "the cluster needs root (cgroups, mounts, a bridge): run as root"
if ! check=$("$cluster_dir/build.sh" --check 2>&1); then
  echo "$check" >&2
  missing "parts of the cluster are missing (above): run cluster/build.sh, which installs the Debian packages and builds the binaries (about 11 minutes cold on 2 cores)"
fi

kubectl() { "$K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG_FILE" --request-timeout 30s "$@"; }

# On any failure: the tails of the logs, the pods' state; then down.sh.
show_logs() {
  local f
  echo "---- state of the cluster" >&2
  kubectl get nodes,pods -o wide >&2 2>&1 || true
  kubectl get events -A --sort-by=.lastTimestamp 2>&1 | tail -20 >&2 || true
  for f in "$STATE"/logs/*.log; do
    [ -f "$f" ] || continue
    echo "---- last lines of $f" >&2
    tail -15 "$f" >&2
  done
}
finish() {
  local rc=$?
  trap - EXIT
  if [ "$rc" != 0 ] || [ "$failed" != 0 ]; then show_logs; fi
  if [ -d "$STATE/run" ]; then
    if "$cluster_dir/down.sh"; then ok "down.sh left nothing behind"; else fail "down.sh left things behind (above)"; fi
  fi
  [ -n "${timings:-}" ] && printf '%s\n' "---- timings (seconds)" "$timings"
  [ "$rc" = 0 ] || [ "$failed" != 0 ] || fail "the test stopped early (exit $rc)"
  echo "$passed passed, $failed failed"
  [ "$failed" = 0 ]
}
trap finish EXIT

if [ -d "$STATE/run" ]; then
  say "a cluster is left in $STATE: taking it down first"
  "$cluster_dir/down.sh" || true
fi
t0=$(now)
if ! "$cluster_dir/up.sh"; then
  fail "up.sh"
  exit 1
fi
ok "up.sh: apiserver ready, $NODES node(s) Ready"
timings=$(awk '{ printf "%-36s %6.1f\n", $1, $2 }' "$STATE/timings")

# ---- pods
t_pods=$(now)
for i in $(seq "$PODS"); do
  # With two nodes, odd pods on the first, even ones on the second.
  node=$NODE_NAME
  [ "$NODES" -ge 2 ] && [ $((i % 2)) = 0 ] && node=stockade-node-2
  cat <<EOF
---
apiVersion: v1
kind: Pod
metadata:
  name: web-$i
  labels: {app: stockade-test}
spec:
  terminationGracePeriodSeconds: 1
  nodeSelector: {kubernetes.io/hostname: $node}
  containers:
  - name: web
    image: $POD_IMAGE
    imagePullPolicy: Never
    env:
    - name: POD_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    command: [sh, -c, 'echo "hello from \$POD_NAME"; mkdir -p /www; echo "\$POD_NAME" >/www/index.html; exec httpd -f -p 8080 -h /www']
    readinessProbe:
      httpGet: {path: /, port: 8080}
      periodSeconds: 1
EOF
done >"$STATE/pods.yaml"
kubectl apply -f "$STATE/pods.yaml" >/dev/null
pod_timeout=${STOCKADE_CLUSTER_POD_TIMEOUT:-120}
deadline=$(($(date +%s) + pod_timeout))
running=0
while [ "$(date +%s)" -lt "$deadline" ]; do
  running=$(kubectl get pods -l app=stockade-test -o 'jsonpath={range .items[*]}{.status.phase}{"\n"}{end}' | grep -c '^Running$' || true)
  [ "$running" = "$PODS" ] && break
  sleep 0.25
done
t_running=$(elapsed "$t_pods" "$(now)")
if [ "$running" != "$PODS" ]; then
  fail "$running of $PODS pods Running after $pod_timeout s"
  kubectl describe pods -l app=stockade-test 2>&1 | tail -40 >&2
  exit 1
fi
ok "$PODS pods Running in ${t_running}s"
if kubectl wait --for=condition=Ready pod -l app=stockade-test --timeout=60s >/dev/null; then
  t_ready=$(elapsed "$t_pods" "$(now)")
  ok "$PODS pods Ready (the kubelet's HTTP probe from the host) in ${t_ready}s"
else
  t_ready=-
  fail "pods not Ready: the kubelet's probe from the host did not reach them"
fi

# ---- logs, exec, the network
ips=()
for i in $(seq "$PODS"); do
  pod=web-$i
  if [ "$(kubectl logs "$pod")" = "hello from $pod" ]; then ok "kubectl logs $pod"; else fail "kubectl logs $pod: $(kubectl logs "$pod" 2>&1 | head -3)"; fi
  out=$(kubectl exec "$pod" -- cat /www/index.html 2>&1 || true)
  if [ "$out" = "$pod" ]; then ok "kubectl exec $pod"; else fail "kubectl exec $pod: $out"; fi
  ip=$(kubectl get pod "$pod" -o 'jsonpath={.status.podIP}')
  ips+=("$ip")
  out=$(curl -fsS -m 5 "http://$ip:8080/" 2>&1 || true)
  if [ "$out" = "$pod" ]; then ok "$pod's IP $ip reached from the host"; else fail "$pod's IP $ip from the host: $out"; fi
done
if [ "$PODS" -ge 2 ]; then
  # nc, not wget: the static busybox's wget looks up the "http" service
  # through glibc's NSS, which a static binary without its modules cannot.
  out=$(kubectl exec web-1 -- sh -c "printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 ${ips[1]} 8080" 2>&1 || true)
  if [ "$(printf '%s\n' "$out" | tail -1)" = web-2 ]; then ok "web-2 reached from web-1 ($(kubectl get pods web-1 web-2 -o 'jsonpath={.items[*].spec.nodeName}'))"; else fail "web-2 (${ips[1]}) from web-1: $out"; fi
fi

t_del=$(now)
if kubectl delete -f "$STATE/pods.yaml" --wait=true --timeout=60s >/dev/null; then
  ok "$PODS pods deleted in $(elapsed "$t_del" "$(now)")s"
else
  fail "deleting the pods"
fi
timings+=$(printf '\n%-36s %6.1f\n%-36s %6s\n%-36s %6.1f' \
  "${PODS}_pods_running" "$t_running" "${PODS}_pods_ready" "$t_ready" "test_total_before_down" "$(elapsed "$t0" "$(now)")")
