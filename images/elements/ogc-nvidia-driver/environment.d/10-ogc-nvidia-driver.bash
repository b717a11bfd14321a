# Pins of the NVIDIA driver in the image. The playbook sets both from the inventory; the version has no
# default on purpose: an image without an exact pin drifts (install.d fails when it is empty).
export DIB_OGC_NVIDIA_BRANCH=${DIB_OGC_NVIDIA_BRANCH:-535}
export DIB_OGC_NVIDIA_VERSION=${DIB_OGC_NVIDIA_VERSION:-}
