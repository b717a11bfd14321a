# No eth0/eth1 stanzas from diskimage-builder's debootstrap element: the interfaces have predictable names
# (enp0s3, ...), and cloud-init writes the configuration of the ones the server really has.
export DIB_APT_MINIMAL_CREATE_INTERFACES=${DIB_APT_MINIMAL_CREATE_INTERFACES:-0}
