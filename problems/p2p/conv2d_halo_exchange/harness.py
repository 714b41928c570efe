import torch


def _grid(world):
    rows = 1 << ((world.bit_length() - 1) // 2)     # 2 -> 1x2, 4 -> 2x2, 8 -> 2x4
    return rows, world // rows


def inputs(size, rank, world_size, gen, device, dtype):
    b, cin, cout = size["batch"], size["in_channels"], size["out_channels"]
    h, wd, k = size["height"], size["width"], size["kernel"]
    assert k % 2 == 1 and min(h, wd) >= k
    x = torch.randn(b, cin, h, wd, generator=gen, device=device, dtype=dtype)
    # uniform weights with variance 1/(Cin*K*K) keep every output element ~ N(0, 1)
    fan_in = cin * k * k
    w = ((torch.rand(cout, cin, k, k, generator=gen, device=device, dtype=torch.float32) * 2 - 1)
         * (3 / fan_in) ** 0.5).to(dtype)
    return x, w


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    b, cin, cout = size["batch"], size["in_channels"], size["out_channels"]
    h, wd, k = size["height"], size["width"], size["kernel"]
    p = (k - 1) // 2
    rows, cols = _grid(world_size)
    # halo elements (per batch and channel) the busiest rank sends: side strips and corners
    busiest = 0
    for i in range(rows):
        for j in range(cols):
            horiz = (j > 0) + (j < cols - 1)
            vert = (i > 0) + (i < rows - 1)
            busiest = max(busiest, horiz * h * p + vert * wd * p + horiz * vert * p * p)
    return {
        "link_bytes": b * cin * busiest * e,
        "hbm_bytes": (b * cin * h * wd + cout * cin * k * k + b * cout * h * wd) * e,   # x, w, out
        "flops": 2 * b * cout * cin * k * k * h * wd,
    }
