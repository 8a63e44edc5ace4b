//! `node:os`: facts about the machine, from the kernel (uname, sysinfo) and the user database.

use rquickjs::{Ctx, Object};

/// The facts `os` in `node.js` reads, as one object made once per call.
pub(super) fn info<'js>(ctx: &Ctx<'js>) -> rquickjs::Result<Object<'js>> {
    let info = Object::new(ctx.clone())?;
    let uname = nix::sys::utsname::uname().ok();
    let field = |get: fn(&nix::sys::utsname::UtsName) -> &std::ffi::OsStr| {
        uname
            .as_ref()
            .map(|u| get(u).to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    info.set("sysname", field(|u| u.sysname()))?;
    info.set("release", field(|u| u.release()))?;
    info.set("version", field(|u| u.version()))?;
    info.set("machine", field(|u| u.machine()))?;
    let hostname = nix::unistd::gethostname()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    info.set("hostname", hostname)?;
    if let Ok(sys) = nix::sys::sysinfo::sysinfo() {
        info.set("totalmem", sys.ram_total() as f64)?;
        info.set("freemem", sys.ram_unused() as f64)?;
        info.set("uptime", sys.uptime().as_secs_f64())?;
        let (one, five, fifteen) = sys.load_average();
        info.set("loadavg", vec![one, five, fifteen])?;
    }
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    info.set("cpus", cpus)?;
    let uid = nix::unistd::getuid();
    info.set("uid", uid.as_raw())?;
    info.set("gid", nix::unistd::getgid().as_raw())?;
    if let Ok(Some(user)) = nix::unistd::User::from_uid(uid) {
        info.set("username", user.name)?;
        info.set("userHome", user.dir.to_string_lossy().into_owned())?;
        info.set("userShell", user.shell.to_string_lossy().into_owned())?;
    }
    Ok(info)
}
