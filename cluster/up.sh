#!/usr/bin/env bash
# Starts a one-node Kubernetes cluster (two with STOCKADE_CLUSTER_NODES=2, see
# node.sh) on loopback, everything under one state dir (default
# /tmp/stockade-cluster, or STOCKADE_CLUSTER_DIR); one cluster at a time on a
# machine (fixed ports, bridge and cgroup names):
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, a
#   containerd of its own (own socket, root and state), a kubelet, a bridge
#   CNI network, the local busybox and pause images; the admin kubeconfig is
#   STATE/kubeconfig. cluster/down.sh takes it all away again.
#   cluster/up.sh            start (the binaries from cluster/build.sh)
# Timings go to STATE/timings (seconds from the start of up.sh).
set -euo pipefail
# shellcheck source=env.sh
. "$(dirname "$0")/env.sh"

[ "$(id -u)" = 0 ] || die "up.sh needs root (cgroups, mounts, the bridge)"
for b in "${K8S_BINARIES[@]}"; do
  [ -x "$K8S_BIN/$b" ] || die "no $K8S_BIN/$b: run cluster/build.sh first"
done
for b in containerd ctr runc openssl unshare findmnt ip iptables-save curl; do
  command -v "$b" >/dev/null || die "no $b: run cluster/build.sh (it installs the Debian packages)"
done
[ -x "$CNI_BIN_DIR/bridge" ] || die "no CNI bridge plugin in $CNI_BIN_DIR: apt-get install containernetworking-plugins"
if [ -e "$STATE/run" ]; then
  die "$STATE holds a cluster already: cluster/down.sh first"
fi
for p in "$ETCD_PORT" "$ETCD_PEER_PORT" "$API_PORT" "$KCM_PORT" "$SCHED_PORT" "$KUBELET_PORT" "$KUBELET_HEALTHZ_PORT"; do
  if ss -Hltn "sport = :$p" | grep -q .; then die "port $p on this machine is in use"; fi
done
if ip link show "$BRIDGE" >/dev/null 2>&1; then
  die "a link $BRIDGE exists already (a cluster left over?): cluster/down.sh or ip link del $BRIDGE"
fi

if [ "$NODES" -ge 2 ] && [ "$(sysctl -n net.ipv4.ip_forward)" != 1 ]; then
  die "a second node needs the host to route between its namespace and node 1 (net.ipv4.ip_forward=1), which up.sh does not change: sysctl -w net.ipv4.ip_forward=1, or STOCKADE_CLUSTER_NODES=1"
fi

t0=$(now)
on_exit() {
  local rc=$?
  [ "$rc" = 0 ] || say "up.sh failed; cluster/down.sh takes away what it started"
}
trap on_exit EXIT
mark() { echo "$1 $(elapsed "$t0" "$(now)")" >>"$STATE/timings"; say "$1 after $(elapsed "$t0" "$(now)")s"; }

mkdir -p "$STATE"/{pki,etc,logs,run,host,etcd,nodes}
: >"$STATE/timings"

# What down.sh compares with and restores: the firewall, the kernel settings.
iptables-save >"$STATE/host/iptables.before" 2>/dev/null || true
ip6tables-save >"$STATE/host/ip6tables.before" 2>/dev/null || true
sysctl_snapshot >"$STATE/host/sysctl.before"
# Host dirs that the runtime makes if missing (CNI's result cache).
for d in /var/lib/cni /var/lib/cni/results /run/containerd /run/containerd/s; do
  [ -e "$d" ] || echo "$d" >>"$STATE/host/dirs-made"
done
# Files there before: down.sh removes only the ones the cluster added (CNI's
# cached results; the sockets of shims, which containerd 1.6 keeps in
# /run/containerd/s whatever its own state dir, shared with any other
# containerd on the machine).
ls -1 /var/lib/cni/results >"$STATE/host/cni-results.before" 2>/dev/null || true
ls -1 /run/containerd/s >"$STATE/host/shim-sockets.before" 2>/dev/null || true

# The state dir is its own shared mount: the kubelet's namespace (see
# kubelet-ns.sh) and the host's see the same mounts below it.
mount --bind "$STATE" "$STATE"
mount --make-shared "$STATE"
echo "$STATE" >"$STATE/host/mounted"

# ---- cgroups: one tree for the cluster, with the daemons in a leaf of it.
CG_ROOT=$(cgroup_base)/stockade-cluster
CG_DAEMONS=$CG_ROOT/daemons
echo "$CG_ROOT" >"$STATE/host/cgroup-root"
mkcg() { # mkcg PATH: in every hierarchy; each dir made is noted for down.sh
  local h rel dir parent
  while read -r h; do
    dir=$h
    rel=${1#/}/
    while [ -n "$rel" ]; do
      parent=$dir
      dir=$dir/${rel%%/*}
      rel=${rel#*/}
      [ -d "$dir" ] && continue
      mkdir "$dir"
      echo "$dir" >>"$STATE/host/cgroups-made"
      if [ -f "$dir/cpuset.cpus" ]; then # cpuset: a new group starts with none
        cat "$parent/cpuset.cpus" >"$dir/cpuset.cpus"
        cat "$parent/cpuset.mems" >"$dir/cpuset.mems"
      fi
    done
  done < <(cgroup_hierarchies)
}
: >"$STATE/host/cgroups-made"
mkcg "$CG_DAEMONS"

# start NAME COMMAND...: in the daemons' cgroup, its own session, logged.
start() {
  local name=$1
  shift
  (
    while read -r h; do echo "$BASHPID" >"$h$CG_DAEMONS/cgroup.procs"; done < <(cgroup_hierarchies)
    exec setsid "$@"
  ) >"$STATE/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$STATE/run/$name.pid"
}
# wait_for WHAT SECONDS COMMAND...: until the command succeeds; the log's tail if not.
wait_for() {
  local what=$1 limit=$2 deadline
  shift 2
  deadline=$(($(date +%s) + limit))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ] || ! pid_of "$what" >/dev/null; then
      say "$what did not come up within ${limit}s; the end of $STATE/logs/$what.log:"
      tail -25 "$STATE/logs/$what.log" >&2 || true
      exit 1
    fi
    sleep 0.2
  done
}

# ---- certificates (openssl), the service-account key, kubeconfigs
pki=$STATE/pki
leaf() ( # leaf NAME SUBJECT EXTENDED_KEY_USAGE [SUBJECT_ALT_NAMES]: a key and a cert by the CA
  cd "$pki"
  openssl ecparam -name prime256v1 -genkey -noout -out "$1.key" 2>/dev/null
  openssl req -new -key "$1.key" -subj "$2" -out "$1.csr"
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$3"
    [ -z "${4:-}" ] || echo "subjectAltName=$4"
  } >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
    -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
)
(
  cd "$pki"
  openssl ecparam -name prime256v1 -genkey -noout -out ca.key 2>/dev/null
  openssl req -x509 -new -key ca.key -subj /CN=stockade-cluster-ca -days 30 -out ca.crt \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key 2>/dev/null
  openssl pkey -in sa.key -pubout -out sa.pub
)
leaf apiserver /CN=kube-apiserver serverAuth \
  "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:127.0.0.1,IP:$NODE_LINK_HOST_IP,IP:$SERVICE_IP"
leaf apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
leaf admin "/O=system:masters/CN=stockade-admin" clientAuth
leaf controller-manager /CN=system:kube-controller-manager clientAuth
leaf scheduler /CN=system:kube-scheduler clientAuth
kubeconfig() { # kubeconfig FILE CERT_NAME [SERVER_ADDRESS]
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: stockade
  cluster:
    server: https://${3:-127.0.0.1}:$API_PORT
    certificate-authority-data: $(base64 -w0 "$pki/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 "$pki/$2.crt")
    client-key-data: $(base64 -w0 "$pki/$2.key")
contexts:
- name: stockade
  context: {cluster: stockade, user: $2}
current-context: stockade
EOF
  chmod 600 "$1"
}
kubeconfig "$KUBECONFIG_FILE" admin
kubeconfig "$STATE/etc/controller-manager.kubeconfig" controller-manager
kubeconfig "$STATE/etc/scheduler.kubeconfig" scheduler
mark certs

# ---- etcd
start etcd "$K8S_BIN/etcd" --name node --data-dir "$STATE/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "node=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync --log-level warn
wait_for etcd 60 curl -fsS "http://127.0.0.1:$ETCD_PORT/health"
mark etcd_ready

# ---- kube-apiserver (the requestheader settings: without them the
# controller-manager and the scheduler log an error every second; no
# front-proxy-client certificate is made, so no request uses them)
mark apiserver_started
start kube-apiserver "$K8S_BIN/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
  --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
  --client-ca-file "$pki/ca.crt" \
  --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
  --service-account-issuer https://kubernetes.default.svc \
  --service-cluster-ip-range "$SERVICE_CIDR" \
  --authorization-mode Node,RBAC --allow-privileged=true \
  --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" \
  --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
  --kubelet-preferred-address-types InternalIP \
  --endpoint-reconciler-type none --profiling=false \
  --requestheader-client-ca-file "$pki/ca.crt" --requestheader-allowed-names front-proxy-client \
  --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
  --requestheader-extra-headers-prefix X-Remote-Extra-
apiserver_ready() {
  curl -fsS --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
    "https://127.0.0.1:$API_PORT/readyz"
}
wait_for kube-apiserver 120 apiserver_ready
mark apiserver_ready

# ---- controller-manager, scheduler
start kube-controller-manager "$K8S_BIN/kube-controller-manager" \
  --kubeconfig "$STATE/etc/controller-manager.kubeconfig" \
  --authentication-kubeconfig "$STATE/etc/controller-manager.kubeconfig" \
  --authorization-kubeconfig "$STATE/etc/controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$KCM_PORT" --leader-elect=false \
  --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
  --use-service-account-credentials=true --service-cluster-ip-range "$SERVICE_CIDR" \
  --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
  --controllers '*,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller' \
  --profiling=false
start kube-scheduler "$K8S_BIN/kube-scheduler" \
  --kubeconfig "$STATE/etc/scheduler.kubeconfig" \
  --authentication-kubeconfig "$STATE/etc/scheduler.kubeconfig" \
  --authorization-kubeconfig "$STATE/etc/scheduler.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --leader-elect=false --profiling=false

# ---- node: containerd, network, images, kubelet
# shellcheck source=node.sh
. "$cluster_dir/node.sh"
# Traffic between the cluster's addresses (pods, nodes) passes the host's
# FORWARD chain: across nodes, and on one bridge too where br_netfilter is
# loaded (net.bridge.bridge-nf-call-iptables=1, as Docker leaves it, with
# FORWARD's policy DROP). down.sh removes every rule added since up.sh.
iptables -w -I FORWARD -s "$POD_NET_PREFIX.0.0/16" -d "$POD_NET_PREFIX.0.0/16" \
  -m comment --comment stockade-cluster -j ACCEPT
node_up 1 "$NODE_NAME" "$BRIDGE"
mark "kubelet_${NODE_NAME}_started"
nodes=("$NODE_NAME")
if [ "$NODES" -ge 2 ]; then
  node_up 2 stockade-node-2 stkbr2 stk-node-2
  mark kubelet_stockade-node-2_started
  nodes+=(stockade-node-2)
fi

kubectl() { "$K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG_FILE" "$@"; }
node_ready() {
  [ "$(kubectl get node "$1" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]
}
for n in "${nodes[@]}"; do
  wait_for "kubelet-$n" 180 node_ready "$n"
  mark "node_${n}_ready"
done
default_sa() { kubectl -n default get serviceaccount default; }
wait_for kube-controller-manager 60 default_sa
mark default_serviceaccount
say "cluster up: export KUBECONFIG=$KUBECONFIG_FILE; kubectl is $K8S_BIN/kubectl"
