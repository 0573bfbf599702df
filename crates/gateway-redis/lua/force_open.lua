-- force_open: the source is dead. An already OPEN gate is left as it is.
load('state', 'epoch', 'streak')
if g.state ~= 'OPEN' then open(true, 'forced_open') end
return reply('-', false)
