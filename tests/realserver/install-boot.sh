#!/bin/sh
# The server image's boot loader, installed on the image build's only boot (tests/realserver/image.py passes
# systemd.run= for it) by Debian's own tools: update-initramfs builds the initramfs for this machine
# (MODULES=dep, customize.sh); grub-install puts GRUB on the EFI system partition, at the removable path the
# firmware boots without an NVRAM entry; update-grub generates /boot/grub/grub.cfg from /etc/default/grub. Then
# this script removes itself.
set -eu
exec > /dev/console 2>&1
update-initramfs -u -k all
mount /boot/efi
grub-install --target=x86_64-efi --efi-directory=/boot/efi --removable --no-nvram
update-grub
umount /boot/efi
rm -f /usr/local/sbin/ogc-install-boot
sync
echo "OGC-BOOT-LOADER-INSTALLED"
