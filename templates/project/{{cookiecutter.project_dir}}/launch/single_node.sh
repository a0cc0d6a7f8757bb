{% set g = cookiecutter._genie %}
{% include ["frameworks/" ~ g.framework ~ "/single_node.sh.j2", "launch/single_node.sh.j2"] %}
