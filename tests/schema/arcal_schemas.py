"""The JSON Schemas of arcal's outputs (docs/schema/NAME.schema.json) as validators.

Each schema has "$id": "https://arcal.invalid/schema/NAME.schema.json" (.invalid is never resolved on
the network) and refers to the others by relative name ("$ref": "metrics.schema.json"); here every
schema is preloaded under its $id, so no reference is ever fetched. Works with Debian's
python3-jsonschema 4.10 (RefResolver) and newer releases (the referencing library)."""
import json
import pathlib

import jsonschema

SCHEMA_DIR = pathlib.Path(__file__).resolve().parents[2] / "docs" / "schema"


def _load():
    return {p.name: json.loads(p.read_text()) for p in sorted(SCHEMA_DIR.glob("*.schema.json"))}


SCHEMAS = _load()


def names():
    """File names of every schema (metrics.schema.json, ...)."""
    return sorted(SCHEMAS)


def uri(name):
    """The URI a schema is known by: its $id, else its file."""
    return SCHEMAS[name].get("$id", (SCHEMA_DIR / name).as_uri())


def validator(name):
    """A validator of docs/schema/NAME (e.g. "metrics.schema.json") in the schema's own draft, with
    every reference to another schema resolved from docs/schema."""
    schema = SCHEMAS[name]
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    try:
        from referencing import Registry, Resource  # jsonschema >= 4.18
        registry = Registry().with_resources([(uri(n), Resource.from_contents(s)) for n, s in SCHEMAS.items()])
        return cls(schema, registry=registry)
    except ImportError:
        store = {uri(n): s for n, s in SCHEMAS.items()}
        return cls(schema, resolver=jsonschema.RefResolver(base_uri=uri(name), referrer=schema, store=store))


def validate(doc, name):
    """Raises jsonschema.ValidationError when doc does not match docs/schema/NAME."""
    validator(name).validate(doc)


def errors(doc, name):
    """Every validation error of doc against docs/schema/NAME, as messages."""
    return [e.message for e in validator(name).iter_errors(doc)]
