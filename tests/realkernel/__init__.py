"""Real-kernel test harness: a tiny Debian guest booted under qemu (see bench/realkernel/README.md)."""
