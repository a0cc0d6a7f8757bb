# This node's own address and interface on the route to the master, found on the node itself:
#   - torchrun --local_addr: the address the rendezvous advertises for this node, instead of
#     its hostname, which the other nodes may not resolve (containers, many clouds);
#   - GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME: the interface gloo and NCCL bind, instead of
#     the one the hostname resolves to (loopback where it maps to 127.0.1.1).
# Values you set yourself (LOCAL_ADDR, GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME) win.
# Sourced by launch/multi_node.sh; run on every node by launch/slurm.sbatch:
#   bash launch/network.sh MASTER_ADDR torchrun ARGS...

# "ADDRESS INTERFACE" of this node towards the IPv4 address $1: ip route get, else Python's
route_to() {
    if command -v ip >/dev/null; then
        local address
        address=$(ip -4 -o route get "$1" 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')
        # towards the master itself the route is "local ... dev lo": name the interface holding it
        ip -4 -o addr show | awk -v a="$address" '{split($4, x, "/"); if (x[1] == a) {print a, $2; exit}}'
    else
        python3 - "$1" <<'PY'
import fcntl, socket, struct, sys

with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    s.connect((sys.argv[1], 9))  # picks the route; a UDP connect sends nothing
    address = s.getsockname()[0]
    for _, name in socket.if_nameindex():
        try:  # SIOCGIFADDR: the interface's IPv4 address
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))
        except OSError:
            continue
        if socket.inet_ntoa(packed[20:24]) == address:
            print(address, name)
            break
PY
    fi
}

node_network() {  # $1: the master's address. Sets LOCAL_ADDR; exports the interfaces.
    local master found interface
    master=$(getent ahostsv4 "$1" 2>/dev/null | awk 'NR == 1 {print $1}')
    if [[ -z "$master" ]]; then
        echo "launch: MASTER_ADDR=$1 does not resolve on $(uname -n): use node 0's IP address, or add its name to DNS or /etc/hosts here" >&2
        return 2
    fi
    found=$(route_to "$master")
    if [[ -z "$found" ]]; then
        echo "launch: no route from $(uname -n) to MASTER_ADDR=$1 ($master): set MASTER_ADDR to node 0's address as this node sees it" >&2
        return 2
    fi
    read -r found interface <<< "$found"
    LOCAL_ADDR="${LOCAL_ADDR:-$found}"
    export GLOO_SOCKET_IFNAME="${GLOO_SOCKET_IFNAME:-$interface}"
    export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-$interface}"
    echo "launch: $(uname -n) reaches $1 from $LOCAL_ADDR on $interface (torchrun --local_addr=$LOCAL_ADDR, GLOO_SOCKET_IFNAME=$GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME=$NCCL_SOCKET_IFNAME)" >&2
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    set -euo pipefail
    master=$1
    shift
    node_network "$master" || exit 2
    exec "$1" --local_addr="$LOCAL_ADDR" "${@:2}"
fi
