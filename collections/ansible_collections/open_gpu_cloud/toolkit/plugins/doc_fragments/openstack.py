# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The connection options every os_* module of open-gpu-cloud takes (plugins/module_utils/cloud/openstack.py)."""

from __future__ import annotations


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    DOCUMENTATION = r"""
options:
  cloud:
    description:
      - A cloud name in C(clouds.yaml) (C(OS_CLIENT_CONFIG_FILE), else openstacksdk's usual search path). The
        local test cloud writes C(ogc-test).
      - Without I(cloud) and I(auth) the C(OS_CLOUD) / C(OS_*) environment applies.
    type: str
  clouds_yaml:
    description:
      - The C(clouds.yaml) that I(cloud) is read from, on the host that runs the module, read before openstacksdk's
        usual search path (as C(OS_CLIENT_CONFIG_FILE) would be). Unset, C(OS_CLIENT_CONFIG_FILE) or the search
        path applies.
    type: path
  auth:
    description:
      - Keystone auth options instead of (or on top of) a cloud from C(clouds.yaml).
      - C(password), C(token) and C(application_credential_secret) are never logged.
    type: dict
    suboptions:
      auth_url: {description: "Keystone's URL, e.g. https://keystone.example:5000/v3.", type: str}
      username: {description: User name., type: str}
      user_id: {description: User ID., type: str}
      password: {description: Password (no_log)., type: str}
      token: {description: A token (no_log)., type: str}
      application_credential_id: {description: Application credential ID., type: str}
      application_credential_name: {description: Application credential name., type: str}
      application_credential_secret: {description: Application credential secret (no_log)., type: str}
      project_name: {description: Project to scope to., type: str}
      project_id: {description: Project ID to scope to., type: str}
      project_domain_name: {description: Domain of the project., type: str}
      project_domain_id: {description: Domain ID of the project., type: str}
      user_domain_name: {description: Domain of the user., type: str}
      user_domain_id: {description: Domain ID of the user., type: str}
      domain_name: {description: Domain to scope to (domain-scoped token)., type: str}
      domain_id: {description: Domain ID to scope to., type: str}
      system_scope: {description: System scope (e.g. all)., type: str}
  auth_type:
    description: The keystoneauth plugin (password, v3applicationcredential, token, ...).
    type: str
  region_name:
    description: Region of the services.
    type: str
  interface:
    description: Which endpoints of the catalog to use.
    type: str
    default: public
    choices: [public, internal, admin]
    aliases: [endpoint_type]
  validate_certs:
    description: Verify the services' TLS certificates (default from C(clouds.yaml), else true).
    type: bool
    aliases: [verify]
  ca_cert:
    description: CA bundle that signed the services' certificates.
    type: str
    aliases: [cacert]
  connect_timeout:
    description: Seconds to wait for a connection to an API endpoint (Keystone's included).
    type: float
    default: 10
  read_timeout:
    description:
      - Seconds to wait for an API's answer (each read of it). An endpoint that accepts connections and never answers
        fails the module after this long instead of holding the run.
    type: float
    default: 120
    aliases: [api_timeout]
requirements:
  - openstacksdk >= 1.0
notes:
  - The connection options are declared once per play, for all these modules, with the action group
    C(group/open_gpu_cloud.toolkit.openstack) in C(module_defaults) (the playbooks pass the environment's C(cloud_connection)).
"""
