# -*- coding: utf-8 -*-
# Copyright: open-gpu-cloud contributors
# Apache License 2.0 (see LICENSE)
"""The one route from the controller's plugins (filter_plugins/, action_plugins/) to the project's module_utils/.

Modules reach module_utils/ as ``ansible.module_utils.<name>``: ansible.cfg's ``module_utils = module_utils``
tells AnsiballZ where to find them. ansible-core does nothing of the kind for plugins that run on the controller
outside a collection (only a collection's ``plugins/module_utils`` is importable there), so this file makes the
project's module_utils/ part of the ``ansible.module_utils`` package, once per process. A plugin runs it first::

    runpy.run_path(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "plugin_utils",
                                "module_utils_route.py"))

and then imports ``ansible.module_utils.<name>`` exactly as a module does. No plugin extends a path itself
(tests/unit/test_module_utils_route.py holds them to that). It is not a plugin: ansible-core loads nothing
from plugin_utils/, the same name collections give the code their controller plugins share.
"""

import os

import ansible.module_utils

MODULE_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")

if MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(MODULE_UTILS)
