#!/bin/sh
# The image's own part, run as root inside its file system (the Dockerfile's last stage, and
# scripts/rootfs for CI, which has no container engine): the packages it needs, the
# non-root user the manifests run as (10001), the directories they mount, nothing left to
# write on the root file system. The programs are already in /usr/local/bin.
# Usage: image-setup.sh            (inside the image)
#        image-setup.sh --packages (prints the Debian packages the image needs)
set -eu

# python3: Python cells run on it. Nothing else: JavaScript and Lua run inside the worker.
PACKAGES="python3"
if [ "${1:-}" = "--packages" ]; then
    echo "$PACKAGES"
    exit 0
fi

missing=""
for package in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing="$missing $package"
done
if [ -n "$missing" ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

groupadd --gid 10001 cellvisor
useradd --no-create-home --uid 10001 --gid 10001 --home-dir /home/cellvisor --shell /usr/sbin/nologin cellvisor
# What deploy/kubernetes mounts: the config and the secret (read-only), the snapshots, the
# socket's runtime directory, the home and /tmp (the only places the daemon writes).
install -d -m 0755 /etc/cellvisor/config /etc/cellvisor/secret
install -d -m 0750 -o cellvisor -g cellvisor /var/lib/cellvisor /var/lib/cellvisor/snapshots
install -d -m 0700 -o cellvisor -g cellvisor /run/cellvisor /home/cellvisor
chmod 0755 /usr/local/bin/cellvisor /usr/local/bin/cellvisor-py-worker
/usr/local/bin/cellvisor --version

# Slim: no package lists, caches, documentation or compiled bytecode left behind.
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old /var/log/*.log \
    /usr/share/doc/* /usr/share/man/* /usr/share/info/* /usr/share/locale/*
find /usr/lib/python3* -name __pycache__ -prune -exec rm -rf {} + 2>/dev/null || true
