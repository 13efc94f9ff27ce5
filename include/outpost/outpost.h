#pragma once
// Everything a typical user needs.
#include "outpost/bus.h"
#include "outpost/error.h"
#include "outpost/event.h"
#include "outpost/factory.h"
#include "outpost/json.h"
#include "outpost/relay.h"
#include "outpost/sink.h"
#include "outpost/store.h"
#include "outpost/tx.h"
