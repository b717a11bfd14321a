#!/bin/sh
# The server image's own configuration, run by mmdebstrap as its --customize-hook (tests/realserver/image.py) on
# the freshly installed tree: what an installer and an operator would have set up on a GPU server, nothing more.
#   customize.sh ROOT PUBKEY ROOT_UUID ESP_UUID MGMT_MAC
set -eu
root=$1 pubkey=$2 root_uuid=$3 esp_uuid=$4 mgmt_mac=$5
here=$(dirname "$0")

echo ogc-server > "$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\togc-server\n::1\tlocalhost ip6-localhost ip6-loopback\n' > "$root/etc/hosts"

# The operator's account: the test key, sudo without a password (Ansible's become).
chroot "$root" useradd --create-home --shell /bin/bash --groups sudo ogc
install -d -m 0700 "$root/home/ogc/.ssh"
install -m 0600 "$pubkey" "$root/home/ogc/.ssh/authorized_keys"
chroot "$root" chown -R ogc:ogc /home/ogc/.ssh
printf 'ogc ALL=(ALL) NOPASSWD:ALL\n' > "$root/etc/sudoers.d/ogc"
chmod 0440 "$root/etc/sudoers.d/ogc"

# The management NIC (the virtio NIC the virtual machine gives this MAC): a static address on qemu's user network.
cat > "$root/etc/systemd/network/10-management.network" <<NETWORK
[Match]
MACAddress=$mgmt_mac

[Network]
Address=10.0.2.15/24
Gateway=10.0.2.2
NETWORK
chroot "$root" systemctl enable systemd-networkd.service

# A persistent journal: the boot before a reboot can be read after it (journalctl -b <boot id>).
mkdir -p "$root/var/log/journal"

# The EFI system partition is mounted only to install the boot loader (install-boot.sh): nothing at boot or in
# update-grub needs it.
cat > "$root/etc/fstab" <<FSTAB
# <file system> <mount point> <type> <options> <dump> <pass>
UUID=$root_uuid / ext4 errors=remount-ro 0 1
UUID=$esp_uuid /boot/efi vfat umask=0077,noauto,nofail 0 0
FSTAB
mkdir -p "$root/boot/efi"

# The operator's GRUB settings: no menu delay, and kernel arguments of their own in GRUB_CMDLINE_LINUX (the role
# must keep them): console=ttyS0 (the serial console the tests read); no_timer_check (emulated machines skip the
# timer check, which can miss its ticks under TCG and then panics with interrupt remapping on); mitigations=off
# and init_on_alloc=0 (under TCG every mitigation and every zeroed page costs: a process start takes a fifth less).
cmdline="console=ttyS0,115200n8 no_timer_check mitigations=off init_on_alloc=0"
sed -i -e 's/^GRUB_TIMEOUT=.*/GRUB_TIMEOUT=0/' -e "s/^GRUB_CMDLINE_LINUX=.*/GRUB_CMDLINE_LINUX=\"$cmdline\"/" \
       "$root/etc/default/grub"
grep -qx "GRUB_CMDLINE_LINUX=\"$cmdline\"" "$root/etc/default/grub"

# The initramfs holds the modules this machine needs (MODULES=dep), not most of the kernel's: under TCG
# mkinitramfs spends over twenty minutes on MODULES=most. Neither setting puts a GPU's host driver in a Debian
# initramfs (initramfs-tools' "most" has no x86 DRM driver); the vfio modules come from
# /etc/initramfs-tools/modules either way. install-boot.sh builds it on the machine itself (in this chroot, "dep"
# would see the build machine's disk).
echo MODULES=dep > "$root/etc/initramfs-tools/conf.d/modules"

# Installs the boot loader on the only boot of the build (image.py passes systemd.run=), then removes itself.
install -m 0755 "$here/install-boot.sh" "$root/usr/local/sbin/ogc-install-boot"

# Timers that would start work in the middle of a test (the tests own the machine's few CPU cycles).
for unit in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer; do
  chroot "$root" systemctl mask "$unit"
done

# Nothing of the machine that built it: no apt sources (the server reaches no mirror), a machine id of its own.
rm -f "$root/etc/apt/sources.list" "$root"/etc/apt/sources.list.d/*
: > "$root/etc/machine-id"
