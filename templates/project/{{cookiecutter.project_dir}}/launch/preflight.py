{% set g = cookiecutter._genie %}
{% if g.nodes > 1 %}
{% include "launch/preflight.py.j2" %}
{% endif %}
