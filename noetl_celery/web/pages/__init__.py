"""Server-rendered operator pages (Jinja2), served by `serve` and inside Flower."""
