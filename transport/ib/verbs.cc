#include "transport/ib/verbs.h"

#include <dlfcn.h>

#include <memory>
#include <mutex>

#include "common/log.h"
#include "common/param.h"

namespace chorus {

namespace {

// The default version of a symbol (what a program linked against the library would get),
// else whatever dlsym finds.
void* symbol(void* lib, const char* name, const char* version) {
  void* p = version != nullptr ? dlvsym(lib, name, version) : nullptr;
  return p != nullptr ? p : dlsym(lib, name);
}

template <class F>
bool take(void* lib, F* slot, const char* name, const char* version, std::string* missing) {
  *slot = reinterpret_cast<F>(symbol(lib, name, version));
  if (*slot == nullptr && missing != nullptr)
    *missing += (missing->empty() ? "" : ", ") + std::string(name);
  return *slot != nullptr;
}

}  // namespace

Result<std::unique_ptr<const VerbsApi>> loadVerbs(const std::string& library) {
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    return invalidUsage("cannot load %s: %s", library.c_str(), why != nullptr ? why : "?");
  }
  std::unique_ptr<VerbsApi> v(new VerbsApi);
  v->library = library;
  std::string missing;
  const char* v11 = "IBVERBS_1.1";
  take(lib, &v->getDeviceList, "ibv_get_device_list", v11, &missing);
  take(lib, &v->freeDeviceList, "ibv_free_device_list", v11, &missing);
  take(lib, &v->getDeviceName, "ibv_get_device_name", v11, &missing);
  take(lib, &v->openDevice, "ibv_open_device", v11, &missing);
  take(lib, &v->closeDevice, "ibv_close_device", v11, &missing);
  take(lib, &v->queryDevice, "ibv_query_device", v11, &missing);
  take(lib, &v->queryPort, "ibv_query_port", v11, &missing);
  take(lib, &v->queryGid, "ibv_query_gid", v11, &missing);
  take(lib, &v->queryGidEx, "_ibv_query_gid_ex", "IBVERBS_1.11", nullptr);
  take(lib, &v->allocPd, "ibv_alloc_pd", v11, &missing);
  take(lib, &v->deallocPd, "ibv_dealloc_pd", v11, &missing);
  take(lib, &v->regMr, "ibv_reg_mr", v11, &missing);
  take(lib, &v->regDmabufMr, "ibv_reg_dmabuf_mr", "IBVERBS_1.12", nullptr);
  take(lib, &v->deregMr, "ibv_dereg_mr", v11, &missing);
  take(lib, &v->createCq, "ibv_create_cq", v11, &missing);
  take(lib, &v->destroyCq, "ibv_destroy_cq", v11, &missing);
  take(lib, &v->createQp, "ibv_create_qp", v11, &missing);
  take(lib, &v->modifyQp, "ibv_modify_qp", v11, &missing);
  take(lib, &v->destroyQp, "ibv_destroy_qp", v11, &missing);
  take(lib, &v->wcStatusStr, "ibv_wc_status_str", nullptr, &missing);
  if (!missing.empty()) {
    dlclose(lib);
    return invalidUsage("%s lacks %s", library.c_str(), missing.c_str());
  }
  // The library stays loaded for the life of the process, like the devices it opens.
  return std::unique_ptr<const VerbsApi>(v.release());
}

Result<const VerbsApi*> processVerbs() {
  static std::once_flag once;
  static std::unique_ptr<const VerbsApi> verbs;
  static Status why = Status::ok();
  std::call_once(once, [] {
    Result<std::unique_ptr<const VerbsApi>> loaded = loadVerbs(paramString("IB_VERBS_LIBRARY"));
    if (!loaded.isOk()) {
      why = loaded.status();
      return;
    }
    verbs = loaded.take();
    LOG_INFO(kSubsysNet, "IB: verbs from %s", verbs->library.c_str());
  });
  if (!why.isOk()) return why;
  return verbs.get();
}

}  // namespace chorus
