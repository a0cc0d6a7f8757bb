{% set g = cookiecutter._genie %}
{% include "modules/fsdp.py.j2" %}
