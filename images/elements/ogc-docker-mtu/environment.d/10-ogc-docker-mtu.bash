# MTU of the tenant network the guests run on (VXLAN over a 1500-byte underlay: 1450).
export DIB_OGC_DOCKER_MTU=${DIB_OGC_DOCKER_MTU:-1450}
