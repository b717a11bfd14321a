"""A real Debian 12 server under qemu for the host phase: its image (image.py) and its virtual machine (vm.py)."""
