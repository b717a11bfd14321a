# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The one loader of stored plans, as a lookup: a thin adapter over ``load_plans`` and ``fleet_plan_load`` of
``plugins/module_utils/passthrough/store.py``, which hold every rule."""

from __future__ import annotations

DOCUMENTATION = r"""
name: passthrough_plans
author: open-gpu-cloud contributors (@open-gpu-cloud)
short_description: Load the stored passthrough plans of hosts, checked
description:
  - The one loader of stored plans. For each host it takes this run's plan when the plan role made it earlier in this
    run, else it reads C(<passthrough_plan_dir>/<host>.json) on the control host, with that host's
    C(passthrough_plan_dir) and C(passthrough_policy).
  - A missing, corrupt, foreign or stale plan file (another plan format, another policy) is refused, naming the host,
    the file and the command that writes it again. A plan file is read only inside its plan directory.
  - With O(other_plan_files), it also loads the plan files of hosts this inventory does not hold (another job slice's,
    or hosts that left the fleet), checked for format and host but not for policy.
  - The role C(passthrough) calls it in its entry point C(load) (roles/passthrough/tasks/load.yml).
options:
  _terms:
    description: The inventory names of the hosts whose plans to load.
    type: list
    elements: str
    required: false
  missing_ok:
    description:
      - Note a host that has neither a plan made in this run nor a plan file in RV(_raw[].missing) instead of
        refusing it. Every other problem is still refused.
    type: bool
    default: false
  other_plan_files:
    description: Plan files (C(<dir>/<host>.json)) of hosts this inventory does not hold, loaded into RV(_raw[].others).
    type: list
    elements: path
    default: []
"""

EXAMPLES = r"""
- name: Load the GPU hosts' plans
  ansible.builtin.set_fact:
    gpu_plans: "{{ lookup('open_gpu_cloud.toolkit.passthrough_plans', groups['gpu_hosts']).plans }}"

- name: Load them, noting the hosts that have no plan yet
  ansible.builtin.set_fact:
    gpu_plans_loaded: "{{ lookup('open_gpu_cloud.toolkit.passthrough_plans', groups['gpu_hosts'], missing_ok=true) }}"
"""

RETURN = r"""
_raw:
  description: One mapping, the plans loaded.
  type: list
  elements: dict
  contains:
    plans:
      description: "C({host: {facts, plan}}): each host's plan and the discovery facts it was made from."
      type: dict
    sources:
      description: "C({host: run | file}): C(run) when the plan is this run's, C(file) when it was read from its file."
      type: dict
    missing:
      description: "C({host: plan file}) of the hosts without a plan, with O(missing_ok)."
      type: dict
    others:
      description: "C({host: {facts, plan}}) of O(other_plan_files)."
      type: dict
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.passthrough import PlanError, store


def read_plan_file(path):
    """A plan file's text; its bytes when they are no UTF-8 (the loader refuses them); None when there is none."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        return b""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


class LookupModule(LookupBase):
    """The plans of the hosts named, checked (see DOCUMENTATION)."""

    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        hosts = []
        for term in terms:
            hosts += term if isinstance(term, list) else [term]
        host_vars = (variables or {}).get("hostvars", {})
        try:
            loaded = store.load_plans(hosts, host_vars, read_plan_file, missing_ok=self.get_option("missing_ok"))
            loaded["others"] = {}
            for path in self.get_option("other_plan_files"):
                loaded["others"][store.plan_file_host(path)] = store.fleet_plan_load(read_plan_file(path), path)
        except PlanError as exc:
            raise AnsibleLookupError(str(exc)) from None
        return [loaded]
