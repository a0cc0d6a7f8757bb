{% set g = cookiecutter._genie %}
{% include "frameworks/" ~ g.framework ~ "/train.py.j2" %}
