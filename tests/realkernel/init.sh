#!/bin/sh
# /init of the real-kernel test guest (built by tests/realkernel/guest.py, booted by vm.py).
# PID 1 in the initramfs. It boots the way a Debian host does as far as drivers go:
#   1. early modules: rd.driver.pre= from the command line (what dracut does) and the modules
#      listed in /etc/initramfs-tools/modules, /etc/modules, /etc/modules-load.d/*.conf;
#   2. coldplug: `modprobe -b <modalias>` for every PCI device (what udev does).
# kmod's modprobe reads /etc/modprobe.d (options, softdep, blacklist) and the kernel command line
# (vfio-pci.ids=, modprobe.blacklist=) exactly as on a host. Then it checks the expectations the
# harness put in /etc/realkernel/expect, copies the parts of /sys and /proc that discovery reads
# (plus the kernel log) to the second serial port as a base64 tar, and powers off.
PATH=/sbin:/bin
export PATH
# Debian's static busybox runs its own applets first (even for names found in PATH): call kmod's
# modprobe by path, or the busybox one would run and ignore the command line's module options.
modprobe=/sbin/modprobe
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp

say() { echo "RK: $*"; }
stamp() { read -r up _ < /proc/uptime; echo "RK-TIME $1 $up"; }
stamp init

# 1. Early modules.
for arg in $(cat /proc/cmdline); do
  case "$arg" in
    rd.driver.pre=*)
      for mod in $(echo "${arg#rd.driver.pre=}" | tr ',' ' '); do
        say "rd.driver.pre: modprobe $mod"
        $modprobe "$mod" || say "modprobe $mod failed"
      done ;;
  esac
done
for list in /etc/initramfs-tools/modules /etc/modules /etc/modules-load.d/*.conf; do
  [ -f "$list" ] || continue
  sed -e 's/#.*//' "$list" | while read -r mod args; do
    [ -n "$mod" ] || continue
    say "$list: modprobe $mod $args"
    # shellcheck disable=SC2086  # module arguments are words
    $modprobe "$mod" $args || say "modprobe $mod failed"
  done
done
stamp early-modules

# 2. Coldplug: one modprobe for every PCI device's modalias, in address order (udev does the same in
# parallel). kmod goes on past aliases that match no module; each exec of it costs time under TCG.
aliases=""
for dev in /sys/bus/pci/devices/*; do
  read -r alias < "$dev/modalias"
  aliases="$aliases $alias"
done
# shellcheck disable=SC2086  # one word per alias
$modprobe -a -b $aliases 2>/dev/null
stamp coldplug

# 3. Checks. Lines of /etc/realkernel/expect: "iommu on|off", "vfio ADDR", "host ADDR".
result=pass
driver_of() {
  if [ -e "/sys/bus/pci/devices/$1/driver" ]; then basename "$(readlink "/sys/bus/pci/devices/$1/driver")"; else echo none; fi
}
if [ -f /etc/realkernel/expect ]; then
  while read -r kind value; do
    case "$kind" in
      iommu)
        groups=$(ls /sys/kernel/iommu_groups | wc -l)
        units=$(ls /sys/class/iommu | wc -l)
        if [ "$value" = on ] && { [ "$groups" -eq 0 ] || [ "$units" -eq 0 ]; }; then
          echo "RK-CHECK FAIL: the IOMMU is not active ($units IOMMU units, $groups IOMMU groups)"; result=fail
        elif [ "$value" = off ] && [ "$groups" -ne 0 ]; then
          echo "RK-CHECK FAIL: the IOMMU is active ($groups IOMMU groups), expected off"; result=fail
        else
          echo "RK-CHECK ok: IOMMU $value ($units IOMMU units, $groups IOMMU groups)"
        fi ;;
      vfio|host)
        drv=$(driver_of "$value")
        if [ ! -e "/sys/bus/pci/devices/$value" ]; then
          echo "RK-CHECK FAIL: $value does not exist in the guest"; result=fail
        elif [ "$kind" = vfio ] && [ "$drv" != vfio-pci ]; then
          echo "RK-CHECK FAIL: $value is on $drv, the plan binds it to vfio-pci"; result=fail
        elif [ "$kind" = host ] && [ "$drv" = vfio-pci ]; then
          echo "RK-CHECK FAIL: $value is on vfio-pci, the plan leaves it on the host"; result=fail
        else
          echo "RK-CHECK ok: $value is on $drv ($kind)"
        fi ;;
      '') ;;
      *) echo "RK-CHECK FAIL: unknown expectation '$kind $value'"; result=fail ;;
    esac
  done < /etc/realkernel/expect
fi
echo "RK-CHECK-RESULT $result"
stamp checks

# 4. Capture what discovery reads into a tmpfs tree, attributes and symlinks as they are (a tar of
# /sys itself fails: sysfs reports sizes it does not deliver), then send it as base64 over ttyS1.
# Few processes: each fork costs milliseconds under TCG.
cap=/tmp/cap
mkdir -p $cap/sys/bus/pci $cap/sys/kernel $cap/sys/class $cap/sys/devices/virtual $cap/proc
functions=$(find /sys/devices/pci* -type d -name '????:??:??.?')   # the PCI functions' directories
# shellcheck disable=SC2046,SC2086  # one word per directory
mkdir -p $(for path in $functions; do echo "$cap$path"; done)
for path in $functions; do
  # Attributes discovery reads (absent ones are skipped), then the links (an AMD IOMMU's own
  # function has an iommu/ directory holding its unit, ivhd0: copied whole).
  cp "$path/vendor" "$path/device" "$path/class" "$path/subsystem_vendor" "$path/subsystem_device" \
     "$path/revision" "$path/numa_node" "$path/boot_vga" "$path/sriov_totalvfs" "$path/sriov_numvfs" \
     "$path/driver_override" "$path/modalias" "$path/enable" "$path/irq" "$path/resource" "$path/reset_method" \
     "$cap$path/" 2>/dev/null
  # reset is write-only (reading it is refused): its presence is what discovery reads.
  if [ -e "$path/reset" ]; then : > "$cap$path/reset"; fi
  cp -a "$path/driver" "$path/iommu_group" "$path/iommu" "$path/physfn" "$path"/virtfn* "$cap$path/" 2>/dev/null
done
find $cap/sys/devices -type f -name reset -exec chmod 200 {} \;   # write-only, as the kernel's
cp -a /sys/bus/pci/devices /sys/bus/pci/drivers $cap/sys/bus/pci/ 2>/dev/null
cp -a /sys/kernel/iommu_groups $cap/sys/kernel/ 2>/dev/null
cp -a /sys/class/iommu $cap/sys/class/ 2>/dev/null
[ -d /sys/devices/virtual/iommu ] && cp -a /sys/devices/virtual/iommu $cap/sys/devices/virtual/ 2>/dev/null
[ -d /sys/firmware/efi ] && mkdir -p $cap/sys/firmware/efi
# The firmware's ACPI tables by name only, as the capture tool takes them (a DMAR or IVRS table says the machine
# offers an IOMMU; q35 has one only with a vIOMMU device).
mkdir -p $cap/sys/firmware/acpi/tables
for table in /sys/firmware/acpi/tables/*; do
  if [ -f "$table" ]; then : > "$cap/sys/firmware/acpi/tables/${table##*/}"; fi
done
cat /proc/cmdline > $cap/proc/cmdline
cat /proc/cpuinfo > $cap/proc/cpuinfo
cat /proc/modules > $cap/proc/modules
stamp copied
dmesg > $cap/dmesg.txt
stty -F /dev/ttyS1 raw -echo 2>/dev/null
{
  echo "RK-CAPTURE-BEGIN"
  tar -C $cap -cz . | base64
  echo "RK-CAPTURE-END"
} > /dev/ttyS1
stamp sent
sync
poweroff -f
