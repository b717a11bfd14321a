#!/bin/sh
# Runs inside the booted GPU guest image (written there by the cloud-init user data of the image test, started as
# a transient unit of its own so that it outlives cloud-init's final stage). Waits until cloud-init has finished,
# then reports what the test checks on the second serial port (/dev/ttyS1, which nothing else writes), one line a
# fact: "OGC-REPORT <name> <exit status> <uptime before> <uptime after> <output, base64>", then "OGC-REPORT-END",
# and powers the guest off.
# It judges nothing: tests/integration/ops/test_gpu_image.py reads the facts and asserts.
out=/dev/ttyS1
kernel=$(uname -r)

report() {
    name=$1
    shift
    started=$(cut -d' ' -f1 /proc/uptime)
    text=$("$@" 2>&1)
    status=$?
    ended=$(cut -d' ' -f1 /proc/uptime)
    printf 'OGC-REPORT %s %s %s %s %s\n' "$name" "$status" "$started" "$ended" \
        "$(printf '%s' "$text" | base64 -w0)" > "$out"
}

# cloud-init, and the datasources it was allowed and used
report cloud-init-status cloud-init status --wait --long
report cloud-init-result cat /run/cloud-init/result.json
report cloud-init-datasource-list cat /etc/cloud/cloud.cfg.d/91-dib-cloud-init-datasources.cfg
# nouveau: loaded modules, the blacklist as modprobe sees it, and the modprobe.d files inside the initramfs
report kernel uname -r
report modules cat /proc/modules
report modprobe-blacklist sh -c "modprobe --showconfig | grep -E '^blacklist '"
# (only etc/modprobe.d out of the zstd archive: unmkinitramfs would write the whole of it, a minute under TCG)
report initramfs-modprobe sh -c "d=\$(mktemp -d) && cd \"\$d\" &&
    zstdcat /boot/initrd.img-$kernel | cpio -id --quiet 'etc/modprobe.d/*' && grep -r '' --include='*.conf' ./etc"
# the NVIDIA kernel module for the running kernel, and what loading it says without a GPU
report nvidia-module-files find "/lib/modules/$kernel" -name 'nvidia*.ko*'
report nvidia-module-info sh -c "modinfo -F name /lib/modules/$kernel/updates/dkms/nvidia-current.ko* &&
    modinfo -F vermagic /lib/modules/$kernel/updates/dkms/nvidia-current.ko* &&
    modinfo -F version /lib/modules/$kernel/updates/dkms/nvidia-current.ko*"
report modprobe-nvidia modprobe nvidia
report dkms-status dkms status
report nvidia-smi nvidia-smi
report nvidia-smi-path sh -c "command -v nvidia-smi"
# Docker, the machine, the packages and their pins, the network
report docker-daemon-json cat /etc/docker/daemon.json
report dmi-product cat /sys/class/dmi/id/product_name
report apt-holds apt-mark showhold
# shellcheck disable=SC2016  # dpkg-query's own format
report nvidia-packages dpkg-query -W -f '${Package} ${Version}\n' nvidia-driver nvidia-smi nvidia-kernel-dkms
report apt-sources sh -c "cat /etc/apt/sources.list.d/*.list"
report apt-preferences cat /etc/apt/preferences.d/ogc-nvidia-driver
report apt-policy apt-cache policy nvidia-driver
report addresses ip -4 -o addr show scope global
report resolv-conf cat /etc/resolv.conf
report root-size df -B1 --output=size /
report modules-load sh -c "grep -RHv '^#' /etc/modules-load.d /usr/lib/modules-load.d /etc/modules 2>/dev/null"
report sshd systemctl is-active ssh
report failed-units systemctl --failed --no-legend --plain
report modules-load-journal journalctl -b -o cat --no-pager -u systemd-modules-load
report dhcp-leases sh -c "cat /var/lib/dhcp/dhclient*.leases"
report uptime cat /proc/uptime
printf 'OGC-REPORT-END\n' > "$out"
systemctl poweroff
