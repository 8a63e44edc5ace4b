-- Cells load Lua source only. A binary chunk (from string.dump, or bytes a cell mutated)
-- is not checked by the VM and can crash the worker; load (which code mode then names
-- lua_load), loadfile, dofile and require therefore refuse them, as `load(s, name, "t")`
-- does.
local raw_load, raw_loadfile, raw_error = load, loadfile, error

load = function(chunk, name, _mode, env)
  if env == nil then
    return raw_load(chunk, name, "t")
  end
  return raw_load(chunk, name, "t", env)
end

loadfile = function(path, _mode, env)
  if env == nil then
    return raw_loadfile(path, "t")
  end
  return raw_loadfile(path, "t", env)
end

dofile = function(path)
  local chunk, err = raw_loadfile(path, "t")
  if not chunk then
    raw_error(err, 2)
  end
  return chunk()
end

-- The searcher for Lua files, as the built-in one but through the text-only loader.
package.searchers[2] = function(name)
  local path, err = package.searchpath(name, package.path)
  if not path then
    return "\n\t" .. err
  end
  local chunk, load_err = raw_loadfile(path, "t")
  if not chunk then
    raw_error(("error loading module '%s' from file '%s':\n\t%s"):format(name, path, load_err), 3)
  end
  return chunk, path
end
