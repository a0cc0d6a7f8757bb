{% set g = cookiecutter._genie %}
{% include "modules/optim.py.j2" %}
