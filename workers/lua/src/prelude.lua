-- Runs once per worker, before the first cell. It routes what the standard library would
-- write to the process's stdout/stderr into the running cell's output, refuses to read stdin
-- (there is nobody to type), and keeps the interrupt hook in place.
--
-- Arguments, from Rust: write_stdout(text), write_stderr(text), display(value).
local write_stdout, write_stderr, display_value = ...

local select, tostring, type, error = select, tostring, type, error
local concat, format, math_type = table.concat, string.format, math.type

local STDIN_MESSAGE = "Kernel requested stdin; interactive input is not supported."

-- Like the standalone interpreter: arguments through tostring, tab-separated, newline.
function print(...)
  local n = select("#", ...)
  local parts = { ... }
  for i = 1, n do
    parts[i] = tostring(parts[i])
  end
  write_stdout(concat(parts, "\t", 1, n) .. "\n")
end

display = display_value

local real_stdin, real_stdout, real_stderr = io.stdin, io.stdout, io.stderr
local io_input, io_output = io.input, io.output
local io_read, io_lines, io_write = io.read, io.lines, io.write
local file_methods = getmetatable(real_stdout).__index
local file_read, file_lines, file_write = file_methods.read, file_methods.lines, file_methods.write

-- The writer for `file` when it is the process's stdout or stderr, else nil.
local function cell_writer(file)
  if file == real_stdout then
    return write_stdout
  elseif file == real_stderr then
    return write_stderr
  end
end

-- The arguments of a write call as one string, formatted as liolib's g_write does.
local function write_text(...)
  local n = select("#", ...)
  local parts = { ... }
  for i = 1, n do
    local value = parts[i]
    if type(value) == "number" then
      parts[i] = math_type(value) == "integer" and format("%d", value) or format("%.14g", value)
    elseif type(value) ~= "string" then
      error(format("bad argument #%d to 'write' (string expected, got %s)", i, type(value)), 3)
    end
  end
  return concat(parts, "", 1, n)
end

function io.write(...)
  local out = io_output()
  local writer = cell_writer(out)
  if writer == nil then
    return io_write(...)
  end
  writer(write_text(...))
  return out
end

function file_methods.write(file, ...)
  local writer = cell_writer(file)
  if writer == nil then
    return file_write(file, ...)
  end
  writer(write_text(...))
  return file
end

function io.read(...)
  if io_input() == real_stdin then
    error(STDIN_MESSAGE, 0)
  end
  return io_read(...)
end

function io.lines(filename, ...)
  if filename == nil and io_input() == real_stdin then
    error(STDIN_MESSAGE, 0)
  end
  return io_lines(filename, ...)
end

function file_methods.read(file, ...)
  if file == real_stdin then
    error(STDIN_MESSAGE, 0)
  end
  return file_read(file, ...)
end

function file_methods.lines(file, ...)
  if file == real_stdin then
    error(STDIN_MESSAGE, 0)
  end
  return file_lines(file, ...)
end

-- Replacing or clearing the hook would make cells impossible to interrupt.
if debug then
  function debug.sethook()
    error("debug.sethook is not available: cellvisor's interrupt hook must stay in place", 2)
  end
end
