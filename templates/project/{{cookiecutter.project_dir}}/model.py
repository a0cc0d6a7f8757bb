{% set g = cookiecutter._genie %}
{% include "tasks/" ~ g.task ~ "/model.py.j2" %}
