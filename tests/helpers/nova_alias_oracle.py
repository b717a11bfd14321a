"""Ask Nova's own code which PCI alias names work end to end (run with the OpenStack venv's python).

Reads a JSON list of names on stdin; prints a JSON list of booleans: True when Nova accepts
``[pci] alias = {"name": NAME, ...}`` (its alias schema), accepts the flavor extra spec
``pci_passthrough:alias = NAME:1`` (its extra-spec validator) and turns that extra spec into a
request for the alias of exactly that name (``_translate_alias_to_requests``). All the names
the schema accepts are configured together, as aliases in one nova.conf."""

import json
import sys

import jsonschema
import nova.conf
from nova import objects
from nova.api.validation.extra_specs import pci_passthrough
from nova.pci import request

objects.register_all()
CONF = nova.conf.CONF
VALIDATOR = pci_passthrough.register()[0]


def spec(name):
    return {"name": name, "vendor_id": "10de", "product_id": "1db4", "device_type": "type-PCI"}


# jsonschema.validate() as Nova calls it, without checking the schema itself again for every name.
SCHEMA_VALIDATOR = jsonschema.validators.validator_for(request._ALIAS_SCHEMA)(request._ALIAS_SCHEMA)  # pylint: disable=protected-access


def schema_ok(name):
    try:
        SCHEMA_VALIDATOR.validate(spec(name))
    except jsonschema.ValidationError:
        return False
    return True


def accepted(name, schema):
    if not schema:
        return False
    try:
        VALIDATOR.validate("pci_passthrough:alias", f"{name}:1")
        requests = request._translate_alias_to_requests(f"{name}:1")  # pylint: disable=protected-access
    except Exception:  # pylint: disable=broad-except  # any refusal by Nova counts as "not usable"
        return False
    return [r.alias_name for r in requests] == [name]


NAMES = json.loads(sys.stdin.read())
SCHEMA = [schema_ok(name) for name in NAMES]
# One [pci] alias option holding every name the schema accepts, as an operator's nova.conf would.
CONF.set_override("alias", [json.dumps(spec(n)) for n, ok in zip(NAMES, SCHEMA) if ok], "pci")
request.get_alias_from_config.cache_clear()
print(json.dumps([accepted(name, ok) for name, ok in zip(NAMES, SCHEMA)]))
